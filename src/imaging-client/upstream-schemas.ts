import { z } from 'zod';
import { firstDuplicateKey } from '../common/json-duplicate-keys';
import { UPSTREAM_STATUSES } from '../imaging-spec/imaging-spec';
import { ImagingClientError } from './imaging-client.error';
import type { UpstreamResponse } from './upstream-http';

/**
 * Response shapes from the contract and docs/upstream-assumptions.md. Every object is
 * "loose": extra fields are kept and tolerated (contract, Versioning 2); a missing or
 * mistyped field we rely on is an `invalid_response`, never a crash further down.
 */

const nullableString = z.string().nullable().optional();

export const tokenSchema = z.looseObject({
  // Sent back in every Authorization header: visible ASCII only (RFC 6750 b64token is a
  // subset), bounded. A CR/LF made every call fail as a "network error", a 1 MB token a 431
  // that failed orders as refused.
  access_token: z
    .string()
    .max(4096)
    .regex(/^[\x21-\x7e]+$/, 'access_token must be visible ASCII'),
  token_type: z.string().refine((t) => t.toLowerCase() === 'bearer', 'token_type must be Bearer'),
  expires_in: z.number().int().positive(),
});

export const testTokenSchema = z.looseObject({
  valid: z.boolean(),
  client_id: z.string().optional(),
  organization_id: z.string().optional(),
  scopes: z.array(z.string()).optional(),
  expires_at: z.string().optional(),
});

export const orderIdSchema = z.looseObject({ order_id: z.uuid() });

/**
 * An upstream order ID as compared: a UUID is the same in either case (RFC 9562 §4). A service
 * that keeps its ids in a uniqueidentifier column answers them in upper case on every read after
 * the create answered lower case; compared as text, our order was "not listed" and its status
 * "about another order", and it was never followed again.
 */
export function upstreamOrderIdKey(id: string): string {
  return id.trim().toLowerCase();
}

/** Whether two upstream order IDs name the same order (upstreamOrderIdKey). */
export function sameUpstreamOrderId(a: string, b: string): boolean {
  return upstreamOrderIdKey(a) === upstreamOrderIdKey(b);
}

/** Whether `id` can be an upstream order ID at all (contract: a UUIDv4, as `/new-order` answers). */
export function isUpstreamOrderId(id: string): boolean {
  return orderIdSchema.shape.order_id.safeParse(id).success;
}

export const metadataSchema = z.looseObject({
  order_id: z.string().min(1),
  metadata: z.record(z.string(), z.unknown()),
});

/**
 * `expires_at` of the upload URL answers (docs/upstream-assumptions.md; the contract names none):
 * a hint for when to renew the URL, the contract's hour from issue applying without it. One
 * that is no string (epoch seconds, null) is left unread rather than failing the upload.
 */
const expiryHint = z
  .unknown()
  .optional()
  .transform((value) => (typeof value === 'string' ? value : undefined));

export const presignedUrlSchema = z.looseObject({
  url: z.url({ protocol: /^https?$/ }),
  expires_at: expiryHint,
});

export const initiateSchema = z.looseObject({
  upload_id: z.string().min(1),
  order_id: z.string().optional(),
});

export const partUrlsSchema = z.looseObject({
  upload_id: z.string().optional(),
  urls: z.array(
    z.looseObject({
      part_number: z.number().int().min(1).max(100),
      url: z.url({ protocol: /^https?$/ }),
    }),
  ),
  expires_at: expiryHint,
});

export const completeSchema = z.looseObject({
  order_id: z.string().optional(),
  status: z.string().optional(),
});

export const abortSchema = z.looseObject({
  upload_id: z.string().optional(),
  aborted: z.boolean().optional(),
});

export const upstreamStatusSchema = z.enum(UPSTREAM_STATUSES);

export const statusSchema = z.looseObject({
  order_id: z.string().min(1),
  study_uid: nullableString,
  status: upstreamStatusSchema,
  updated_at: nullableString,
});

export const listOrdersSchema = z.looseObject({
  orders: z.array(
    z.looseObject({
      order_id: z.string().min(1),
      study_uid: nullableString,
      // Any value: one the contract does not name is set apart by the client, not fatal.
      status: z.string().min(1),
      created_at: nullableString,
      updated_at: nullableString,
      batch_id: nullableString,
    }),
  ),
});

export const qcBypassSchema = z.looseObject({
  order_id: z.string().optional(),
  bypass_requested: z.boolean(),
});

export const cancelSchema = z.looseObject({
  order_id: z.string().optional(),
  status: z.string().optional(),
});

export const batchSchema = z.looseObject({ batch_id: z.uuid() });

export const associateSchema = z.looseObject({
  order_id: z.string().optional(),
  batch_id: z.string().optional(),
});

export const productsSchema = z.looseObject({
  products: z.array(
    z.looseObject({
      id: z.string().min(1),
      name: nullableString,
      version: nullableString,
      // Contract (1.0.8): present, null when not assigned.
      UDI: z.string().nullable(),
      fda_desc: z.string().nullable(),
    }),
  ),
});

export const recentActivitySchema = z.looseObject({
  activity: z.array(
    z.looseObject({
      orderId: z.string().optional(),
      statusDesc: nullableString,
      failureReason: nullableString,
      timestamp: nullableString,
    }),
  ),
});

export const reportsPollSchema = z.looseObject({
  reports: z.array(
    z.looseObject({
      report_id: z.string().min(1),
      order_id: z.string().optional(),
      study_uid: nullableString,
      status: z.string().optional(),
      report_types: z.array(z.string()).optional(),
      created_at: nullableString,
    }),
  ),
});

export const reportsAckSchema = z.looseObject({ acknowledged: z.number().int().nonnegative() });

export const agentReportsSchema = z.looseObject({
  accepted: z.number().int().nonnegative(),
  rejected: z.array(z.looseObject({ order_id: z.string(), reason: z.string() })).default([]),
});

export const heartbeatSchema = z.looseObject({
  pending_qc_bypass_requests: z.array(
    z.looseObject({ order_id: z.string(), reason: nullableString, requested_at: nullableString }),
  ),
});

/**
 * Entries of one list (`/list-orders`, `/reports`) read at most, over all its pages. The
 * contract's lists hold active orders and unacknowledged reports: with at most 100 uploads at
 * once and about 3 hours of processing, tens of thousands is far above any real answer, while
 * a hostile one of 32 MiB (860,000 entries) held the event loop, and /health, 2 s per poll.
 */
export const MAX_LIST_ENTRIES = 50_000;

/** Parses a JSON body against `schema`, or says precisely (paths only, never values) what was wrong. */
export function parseJson<S extends z.ZodType>(
  operation: string,
  response: UpstreamResponse,
  schema: S,
): z.infer<S> {
  return validate(operation, response, schema, parseBody(operation, response));
}

/**
 * parseJson for a list answer whose entries are in `field`: more than MAX_LIST_ENTRIES is
 * refused before the schema reads a single entry (the schema costs as much as the parse).
 */
export function parseListJson<S extends z.ZodType>(
  operation: string,
  response: UpstreamResponse,
  schema: S,
  field: string,
  alreadyRead = 0,
): z.infer<S> {
  const data = parseBody(operation, response);
  const entries =
    data && typeof data === 'object' ? (data as Record<string, unknown>)[field] : undefined;
  if (Array.isArray(entries) && alreadyRead + entries.length > MAX_LIST_ENTRIES) {
    throw new ImagingClientError(
      'invalid_response',
      operation,
      `the list holds more than ${MAX_LIST_ENTRIES} entries (${field}); not read`,
      { status: response.status },
    );
  }
  return validate(operation, response, schema, data);
}

function parseBody(operation: string, response: UpstreamResponse): unknown {
  const text = response.body.toString('utf8');
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    throw new ImagingClientError(
      'invalid_response',
      operation,
      `response body is not JSON (status ${response.status})`,
      {
        status: response.status,
      },
    );
  }
  // `{"status":"PENDING", …, "status":"DELIVERED"}` has no one meaning: JSON.parse keeps the
  // last, a proxy or the service's own logs may keep the first (RFC 8259 §4). Refused, named
  // by its path (never a value); one more linear pass, as long as the parse.
  const duplicate = firstDuplicateKey(text);
  if (duplicate !== undefined) {
    throw new ImagingClientError(
      'invalid_response',
      operation,
      `response names ${duplicate} twice in one object`,
      { status: response.status },
    );
  }
  return data;
}

function validate<S extends z.ZodType>(
  operation: string,
  response: UpstreamResponse,
  schema: S,
  data: unknown,
): z.infer<S> {
  const result = schema.safeParse(data);
  if (!result.success) {
    const where = result.error.issues
      .slice(0, 5)
      .map((issue) => `${issue.path.join('.') || '(root)'}: ${issue.message}`)
      .join('; ');
    throw new ImagingClientError(
      'invalid_response',
      operation,
      `response does not match the contract: ${where}`,
      {
        status: response.status,
      },
    );
  }
  return result.data;
}
