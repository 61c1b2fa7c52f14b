import type { z } from 'zod';
import type { PeerBase } from '../common/peer-url';
import { readDocument } from './document-answers';
import type { OrderRef, UpstreamDocument } from './imaging-client.types';
import { readAllPages, type PageRequest } from './list-pages';
import { ImagingClientError } from './imaging-client.error';
import {
  MAX_LIST_ANSWER_BYTES,
  MAX_LIST_TOTAL_BYTES,
  type CallSpec,
  type HttpMethod,
  type UpstreamHttp,
  type UpstreamResponse,
} from './upstream-http';
import {
  abortSchema,
  agentReportsSchema,
  associateSchema,
  batchSchema,
  cancelSchema,
  completeSchema,
  heartbeatSchema,
  initiateSchema,
  metadataSchema,
  parseJson,
  partUrlsSchema,
  presignedUrlSchema,
  productsSchema,
  qcBypassSchema,
  recentActivitySchema,
  reportsAckSchema,
  statusSchema,
  testTokenSchema,
} from './upstream-schemas';

/**
 * How the client calls the API with its bearer token: a JSON operation (below), a report
 * document, or every page of a list. The token request (Basic) and `POST /new-order` (with its
 * own retry hook) are made directly.
 */

/** The contract's plain JSON operations, each `[method, path, schema of its answer]`. */
export const JSON_OPERATIONS = {
  'test-token': ['GET', '/test-token', testTokenSchema],
  'add-metadata': ['PATCH', '/add-metadata', metadataSchema],
  metadata: ['GET', '/metadata', metadataSchema],
  status: ['GET', '/status', statusSchema],
  'cancel-order': ['PATCH', '/cancel-order', cancelSchema],
  'single-put-url': ['GET', '/upload/single-put', presignedUrlSchema],
  'multipart-initiate': ['POST', '/upload/multipart/initiate', initiateSchema],
  'multipart-presigned-urls': ['POST', '/upload/multipart/presigned-urls', partUrlsSchema],
  'multipart-complete': ['POST', '/upload/multipart/complete', completeSchema],
  'multipart-abort': ['POST', '/upload/multipart/abort', abortSchema],
  'qc-bypass': ['PATCH', '/qc-bypass', qcBypassSchema],
  'new-batch': ['POST', '/new-batch', batchSchema],
  'associate-order-to-batch': ['PATCH', '/associate-order-to-batch', associateSchema],
  products: ['GET', '/products', productsSchema],
  'recent-activity': ['GET', '/recent-activity', recentActivitySchema],
  'reports-ack': ['POST', '/reports', reportsAckSchema],
  'agent-reports': ['POST', '/agent/reports', agentReportsSchema],
  'agent-heartbeat': ['POST', '/agent/heartbeat', heartbeatSchema],
} as const satisfies Record<string, readonly [HttpMethod, string, z.ZodType]>;

export type JsonOperation = keyof typeof JSON_OPERATIONS;

/** The parsed answer of `O`. */
export type JsonAnswer<O extends JsonOperation> = z.infer<(typeof JSON_OPERATIONS)[O][2]>;

/** What a call sends besides its path: the query, the JSON body, the order it concerns. */
export type CallRequest = Pick<CallSpec<unknown>, 'query' | 'json' | 'orderId'>;

/** Calls a JSON operation with the bearer token; its answer must match the operation's schema. */
export function callJson<O extends JsonOperation>(
  http: UpstreamHttp,
  operation: O,
  request: CallRequest = {},
): Promise<JsonAnswer<O>> {
  const [method, path, schema] = JSON_OPERATIONS[operation];
  return http.call<JsonAnswer<O>>({
    operation,
    method,
    path,
    ...request,
    auth: 'bearer',
    parse: (r) => parseJson(operation, r, schema) as JsonAnswer<O>,
  });
}

/** A `GET` of a report document (document-answers.ts). */
export function callDocument(
  http: UpstreamHttp,
  operation: string,
  path: string,
  request: CallRequest,
): Promise<UpstreamDocument> {
  return http.call({
    operation,
    method: 'GET',
    path,
    ...request,
    auth: 'bearer',
    parse: (r) => readDocument(operation, r),
  });
}

/** Every page of a list endpoint, bounded (MAX_LIST_PAGES), only within `base` (IMAGING_BASE_URL). */
export function readList<T>(
  http: UpstreamHttp,
  base: PeerBase,
  list: { operation: string; path: string; query: Record<string, string> },
  parse: (
    r: UpstreamResponse,
    alreadyRead: number,
  ) => { items: T[]; body: Record<string, unknown> },
): Promise<{ items: T[]; pages: number }> {
  const { operation, path, query } = list;
  let bytes = 0;
  return readAllPages<T>({ path, query }, operation, base, (page: PageRequest, alreadyRead) =>
    http.call({
      operation,
      method: 'GET',
      // The rate-limit key stays the endpoint's, whatever path a next link names.
      path: page.path,
      rateLimitKey: path,
      query: page.query,
      auth: 'bearer',
      maxAnswerBytes: MAX_LIST_ANSWER_BYTES,
      parse: (r) => {
        // Entries keep their extra fields until the whole list is read: pages each under the
        // page limit would otherwise add up to MAX_LIST_PAGES times it (1.6 GB held at once).
        bytes += r.body.length;
        if (bytes > MAX_LIST_TOTAL_BYTES) {
          throw new ImagingClientError(
            'invalid_response',
            operation,
            `the list's pages hold more than ${MAX_LIST_TOTAL_BYTES} bytes in all; not read further`,
            { status: r.status },
          );
        }
        return parse(r, alreadyRead);
      },
    }),
  );
}

/** A call about the order `ref` names: by its id, or by its study (then no order id to record). */
export function byRef(ref: OrderRef, query: Record<string, string> = {}): CallRequest {
  return 'orderId' in ref
    ? { query: { order_id: ref.orderId, ...query }, orderId: ref.orderId }
    : { query: { study_uid: ref.studyUid, ...query } };
}

/** A call about one order, named in the query. */
export function byOrder(orderId: string): CallRequest {
  return { query: { order_id: orderId }, orderId };
}
