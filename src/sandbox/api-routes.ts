import { randomBytes, randomUUID } from 'node:crypto';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import {
  FAILURE_REPORT_TYPES,
  LIMITS,
  QC_REPORT_TYPES,
  QC_ROUND_HEADER,
  QC_ROUNDS,
  REPORT_TYPES,
  type FailureReportType,
  type QcReportType,
  type QcRound,
  type ReportType,
} from '../imaging-spec/imaging-spec';
import {
  readForm,
  readJsonObject,
  sendDocument,
  sendJson,
  type RequestContext,
  type Router,
} from './http-router';
import {
  DEFAULT_PRODUCTS,
  SANDBOX_PRODUCTS,
  productsOf,
  sameProducts,
  validateMetadata,
  type Metadata,
  type MetadataValue,
} from './metadata-rules';
import { concatenateParts, normalizeEtag } from './object-storage.handler';
import { STATUS_DESCRIPTIONS } from './order-lifecycle';
import { CONTENT_TYPES, renderDocument } from './report-documents';
import { batchDocument, failureDocument, qcReportBody, resultsDocument } from './report-builders';
import type { SandboxServices } from './sandbox-services';
import { metadataOf, studyUidOf, type SandboxOrder } from './sandbox-state';
import { SandboxError, badRequest, conflict, notFound } from './sandbox.error';
import { inspectStudyObject } from './study-intake';
import type { Principal } from './token-store';

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i;
const ERR_AUTH = [401, 403, 410, 429];

function requireUuid(value: unknown, name: string): string {
  if (typeof value !== 'string' || value === '')
    throw badRequest('invalid_request', `${name} is required`);
  if (!UUID_V4.test(value))
    throw badRequest('invalid_parameter', `${name} must be a UUIDv4, got "${value.slice(0, 80)}"`);
  return value.toLowerCase();
}

function oneOf<T extends string>(
  value: string | null,
  allowed: readonly T[],
  name: string,
  fallback?: T,
): T {
  if (value === null || value === '') {
    if (fallback !== undefined) return fallback;
    throw badRequest(
      'invalid_request',
      `query parameter ${name} is required (one of ${allowed.join(', ')})`,
    );
  }
  if (!(allowed as readonly string[]).includes(value)) {
    throw badRequest(
      'invalid_parameter',
      `${name} must be one of ${allowed.join(', ')}, got "${value.slice(0, 40)}"`,
    );
  }
  return value as T;
}

/** Contract rule 1: `order_id` or `study_uid` (order_id preferred, so it wins when both are given). */
function locate(
  svc: SandboxServices,
  ctx: RequestContext,
  principal: Principal,
  allowStudyUid: boolean,
): SandboxOrder {
  const orderId = ctx.query.get('order_id');
  const studyUid = ctx.query.get('study_uid');
  if (orderId !== null && orderId !== '')
    return svc.state.byOrderId(requireUuid(orderId, 'order_id'), principal);
  if (studyUid !== null && studyUid !== '') {
    if (!allowStudyUid)
      throw badRequest('invalid_request', `${ctx.path} is addressed by order_id only`);
    return svc.state.byStudyUid(studyUid, principal);
  }
  throw badRequest(
    'invalid_request',
    allowStudyUid
      ? 'query parameter order_id or study_uid is required'
      : 'query parameter order_id is required',
  );
}

function statusBody(svc: SandboxServices, o: SandboxOrder): Record<string, unknown> {
  return {
    order_id: o.orderId,
    study_uid: studyUidOf(o),
    status: o.status,
    updated_at: svc.clock.iso(o.updatedAt),
  };
}

function applyMetadata(order: SandboxOrder, patch: Record<string, MetadataValue | null>): void {
  const next: Metadata = { ...order.apiMetadata };
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete next[k];
    else next[k] = v;
  }
  order.apiMetadata = next;
}

function presignedUrl(
  svc: SandboxServices,
  key: Parameters<SandboxServices['signer']['presign']>[1],
): { url: string; expires_at: string } {
  const expiresAt = svc.clock.now() + LIMITS.presignedUrlExpirySeconds * 1000;
  return {
    url: svc.signer.presign(svc.origin(), key, expiresAt),
    expires_at: svc.clock.iso(Math.floor(expiresAt / 1000) * 1000),
  };
}

function createOrder(svc: SandboxServices, principal: Principal, metadata: Metadata): SandboxOrder {
  const now = svc.clock.now();
  const order: SandboxOrder = {
    orderId: randomUUID(),
    organizationId: principal.organizationId,
    ownerClientId: principal.clientId,
    createdAt: now,
    seq: svc.state.nextSeq(),
    updatedAt: now,
    status: 'PENDING',
    apiMetadata: metadata,
    studyMetadata: {},
    batchId: null,
    upload: null,
    instanceGroup: null,
    plan: [],
    nextAt: null,
    qcRounds: [],
    qcFailedAt: null,
    bypass: null,
    failure: null,
    agentFailure: null,
    history: [{ status: 'PENDING', at: now, failureReason: null, seq: svc.state.nextSeq() }],
  };
  svc.state.orders.set(order.orderId, order);
  return order;
}

function uploadFor(svc: SandboxServices, uploadId: unknown, principal: Principal) {
  const id = requireUuid(uploadId, 'upload_id');
  const upload = svc.state.uploads.get(id);
  if (!upload || upload.organizationId !== principal.organizationId)
    throw notFound('upload_not_found', `no multipart upload ${id}`);
  svc.state.byOrderId(upload.orderId, principal); // standard users: only their own orders' uploads
  return upload;
}

function visibleReports(svc: SandboxServices, principal: Principal) {
  const visible = new Set(svc.state.visibleOrders(principal).map((o) => o.orderId));
  return [...svc.state.reports.values()].filter(
    (r) => r.organizationId === principal.organizationId && visible.has(r.orderId),
  );
}

function requireOwnOrganization(ctx: RequestContext, principal: Principal): void {
  const org = ctx.query.get('organizationId');
  if (org === null || org === '')
    throw badRequest('invalid_request', 'query parameter organizationId is required');
  if (org !== principal.organizationId) {
    throw new SandboxError(403, 'forbidden', 'the token is not provisioned for this organization');
  }
}

const orderIdQuery = { name: 'order_id', description: 'order UUIDv4 (preferred)' };
const studyUidQuery = {
  name: 'study_uid',
  description: 'DICOM StudyInstanceUID; the most recent order wins',
};

export function registerApiRoutes(router: Router, svc: SandboxServices): void {
  const { state, lifecycle, clock, tokens } = svc;

  const issueToken = async (
    ctx: RequestContext,
    grantType: string | null,
    scope: string | null,
  ): Promise<void> => {
    const client = tokens.authenticateClient(ctx.req);
    if (grantType === null || grantType === '')
      throw badRequest('invalid_request', 'grant_type=client_credentials is required');
    if (grantType !== 'client_credentials') {
      throw badRequest(
        'unsupported_grant_type',
        `grant_type "${grantType.slice(0, 40)}" is not supported; only client_credentials (there is no refresh grant)`,
      );
    }
    const t = tokens.issue(client, scope);
    sendJson(
      ctx.res,
      200,
      {
        access_token: t.accessToken,
        token_type: 'Bearer',
        expires_in: t.expiresIn,
        scope: t.scopes.join(' '),
      },
      { 'Cache-Control': 'no-store', Pragma: 'no-cache' },
    );
  };

  router.add({
    method: 'POST',
    path: '/auth/token',
    doc: {
      summary: 'OAuth 2.0 client credentials token',
      permission: 'none',
      body: 'form',
      errors: [400, 401, 415, 410, 429],
    },
    handle: async (ctx) => {
      const form = await readForm(ctx);
      await issueToken(ctx, form.get('grant_type'), form.get('scope'));
    },
  });
  router.add({
    method: 'GET',
    path: '/auth/token',
    doc: {
      summary: 'Legacy token retrieval (query grant_type)',
      permission: 'none',
      legacy: true,
      query: [{ name: 'grant_type', required: true, enum: ['client_credentials'] }],
      errors: [400, 401, 410, 429],
    },
    handle: async (ctx) => issueToken(ctx, ctx.query.get('grant_type'), ctx.query.get('scope')),
  });

  router.add({
    method: 'GET',
    path: '/test-token',
    doc: {
      summary: 'Validates the token; no side effects',
      permission: 'token',
      errors: [401, 410, 429],
    },
    handle: async (ctx, p) => {
      sendJson(ctx.res, 200, {
        valid: true,
        client_id: p.clientId,
        organization_id: p.organizationId,
        role: p.role,
        scopes: p.scopes,
        expires_at: clock.iso(p.expiresAt),
      });
    },
  });

  router.add({
    method: 'POST',
    path: '/new-order',
    doc: {
      summary: 'Creates an order from a JSON metadata object',
      permission: 'write',
      body: 'json',
      successStatus: 201,
      errors: [400, 413, 415, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const body = (await readJsonObject(ctx))!;
      const order = createOrder(svc, p, validateMetadata(body, false) as Metadata);
      sendJson(ctx.res, 201, { order_id: order.orderId });
    },
  });
  router.add({
    method: 'GET',
    path: '/new-order',
    doc: {
      summary: 'Legacy order creation: metadata as query parameters (products comma-separated)',
      permission: 'write',
      legacy: true,
      successStatus: 201,
      errors: [400, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const raw: Record<string, unknown> = {};
      for (const [k, v] of ctx.query)
        raw[k] =
          k === 'products'
            ? v
                .split(',')
                .map((x) => x.trim())
                .filter(Boolean)
            : v;
      const order = createOrder(svc, p, validateMetadata(raw, false) as Metadata);
      sendJson(ctx.res, 201, { order_id: order.orderId });
    },
  });

  router.add({
    method: 'PATCH',
    path: '/add-metadata',
    doc: {
      summary: 'Adds or overwrites API metadata (null removes a key)',
      permission: 'write',
      query: [orderIdQuery, studyUidQuery],
      body: 'json',
      errors: [400, 404, 409, 415, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const order = locate(svc, ctx, p, true);
      const patch = validateMetadata((await readJsonObject(ctx))!, true);
      if (lifecycle.isTerminal(order))
        throw conflict(
          'order_terminal',
          `order is ${order.status}; its metadata can no longer change`,
        );
      if ('products' in patch && order.batchId) {
        const batch = state.batches.get(order.batchId)!;
        const next = patch.products === null ? DEFAULT_PRODUCTS : (patch.products as string[]);
        if (!sameProducts(next, batch.products)) {
          throw conflict(
            'products_mismatch',
            `order is in batch ${batch.batchId}, whose products are [${batch.products.join(', ')}]`,
          );
        }
      }
      applyMetadata(order, patch);
      order.updatedAt = clock.now();
      sendJson(ctx.res, 200, { order_id: order.orderId, metadata: metadataOf(order) });
    },
  });
  router.add({
    method: 'GET',
    path: '/metadata',
    doc: {
      summary: 'All current metadata (API values over DICOM tags and sidecar)',
      permission: 'read',
      query: [orderIdQuery, studyUidQuery],
      errors: [400, 404, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const order = locate(svc, ctx, p, true);
      sendJson(ctx.res, 200, { order_id: order.orderId, metadata: metadataOf(order) });
    },
  });

  const uploadUrl = (kind: 'single' | 'instance') => async (ctx: RequestContext, p: Principal) => {
    const order = locate(svc, ctx, p, false);
    if (lifecycle.isTerminal(order))
      throw conflict('order_terminal', `order is ${order.status}; it accepts no upload`);
    sendJson(
      ctx.res,
      200,
      presignedUrl(svc, {
        kind,
        orderId: order.orderId,
        nonce: randomBytes(12).toString('base64url'),
      }),
    );
  };
  router.add({
    method: 'GET',
    path: '/upload/single-put',
    doc: {
      summary: 'Presigned write-only URL for one object (studies under 5 MB)',
      permission: 'write',
      query: [{ ...orderIdQuery, required: true }],
      errors: [400, 404, 409, ...ERR_AUTH],
    },
    handle: uploadUrl('single'),
  });
  router.add({
    method: 'GET',
    path: '/upload',
    doc: {
      summary:
        'Legacy: presigned URL for a single instance (DICOM or ZIP); instances of one study arriving at most 1 minute apart are processed together',
      permission: 'write',
      legacy: true,
      query: [{ ...orderIdQuery, required: true }],
      errors: [400, 404, 409, ...ERR_AUTH],
    },
    handle: uploadUrl('instance'),
  });

  router.add({
    method: 'POST',
    path: '/upload/multipart/initiate',
    doc: {
      summary: 'Starts a multipart upload',
      permission: 'write',
      body: 'json',
      bodySchema: {
        type: 'object',
        required: ['order_id'],
        properties: {
          order_id: { type: 'string', format: 'uuid' },
          size_bytes: { type: 'integer', minimum: 0 },
        },
      },
      successStatus: 201,
      errors: [400, 404, 409, 413, 415, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const body = (await readJsonObject(ctx))!;
      const order = state.byOrderId(requireUuid(body.order_id, 'order_id'), p);
      const size = body.size_bytes;
      if (size !== undefined && (typeof size !== 'number' || !Number.isInteger(size) || size < 0)) {
        throw badRequest('invalid_parameter', 'size_bytes must be a non-negative integer');
      }
      if (typeof size === 'number' && size > LIMITS.maxStudyBytes) {
        throw new SandboxError(
          413,
          'study_too_large',
          `a study may hold at most ${LIMITS.maxStudyBytes} bytes (10 GB); ${size} announced`,
        );
      }
      if (lifecycle.isTerminal(order))
        throw conflict('order_terminal', `order is ${order.status}; it accepts no upload`);
      if (state.activeUploads(p.organizationId) >= svc.options.maxConcurrentUploads) {
        throw new SandboxError(
          429,
          'too_many_concurrent_uploads',
          `at most ${svc.options.maxConcurrentUploads} uploads may be open at once; complete or abort one`,
          {},
          { 'Retry-After': '30' },
        );
      }
      const uploadId = randomUUID();
      state.uploads.set(uploadId, {
        uploadId,
        orderId: order.orderId,
        organizationId: p.organizationId,
        state: 'open',
        createdAt: clock.now(),
        announcedBytes: typeof size === 'number' ? size : null,
        parts: new Map(),
        inFlight: 0,
      });
      sendJson(ctx.res, 201, { upload_id: uploadId, order_id: order.orderId });
    },
  });

  router.add({
    method: 'POST',
    path: '/upload/multipart/presigned-urls',
    doc: {
      summary: 'One presigned URL per part (at most 100)',
      permission: 'write',
      body: 'json',
      bodySchema: {
        type: 'object',
        required: ['upload_id'],
        properties: {
          upload_id: { type: 'string', format: 'uuid' },
          parts: { type: 'integer', minimum: 1, maximum: 100 },
          part_numbers: { type: 'array', items: { type: 'integer', minimum: 1, maximum: 100 } },
        },
      },
      errors: [400, 404, 409, 415, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const body = (await readJsonObject(ctx))!;
      const upload = uploadFor(svc, body.upload_id, p);
      if (upload.state !== 'open')
        throw conflict('upload_not_open', `this multipart upload is ${upload.state}`);
      let numbers: number[];
      if (body.part_numbers !== undefined) {
        const list = body.part_numbers;
        if (
          !Array.isArray(list) ||
          list.length === 0 ||
          list.some((n) => !Number.isInteger(n) || (n as number) < 1)
        ) {
          throw badRequest(
            'invalid_parameter',
            'part_numbers must be a non-empty array of integers from 1',
          );
        }
        if (
          list.some((n) => (n as number) > LIMITS.multipartMaxParts) ||
          list.length > LIMITS.multipartMaxParts
        ) {
          throw badRequest(
            'too_many_parts',
            `part numbers run from 1 to ${LIMITS.multipartMaxParts}`,
          );
        }
        numbers = [...new Set(list as number[])].sort((a, b) => a - b);
      } else {
        const n = body.parts;
        if (typeof n !== 'number' || !Number.isInteger(n) || n < 1)
          throw badRequest(
            'invalid_parameter',
            'parts must be an integer from 1 to 100 (or give part_numbers)',
          );
        if (n > LIMITS.multipartMaxParts)
          throw badRequest(
            'too_many_parts',
            `at most ${LIMITS.multipartMaxParts} parts per upload; ${n} requested`,
          );
        numbers = Array.from({ length: n }, (_, i) => i + 1);
      }
      const expiresAt = clock.now() + LIMITS.presignedUrlExpirySeconds * 1000;
      sendJson(ctx.res, 200, {
        upload_id: upload.uploadId,
        urls: numbers.map((partNumber) => ({
          part_number: partNumber,
          url: svc.signer.presign(
            svc.origin(),
            { kind: 'part', uploadId: upload.uploadId, partNumber },
            expiresAt,
          ),
        })),
        expires_at: clock.iso(Math.floor(expiresAt / 1000) * 1000),
      });
    },
  });

  router.add({
    method: 'POST',
    path: '/upload/multipart/complete',
    doc: {
      summary: 'Completes the upload from part numbers and ETags; starts processing',
      permission: 'write',
      body: 'json',
      bodySchema: {
        type: 'object',
        required: ['upload_id', 'parts'],
        properties: {
          upload_id: { type: 'string', format: 'uuid' },
          parts: {
            type: 'array',
            items: {
              type: 'object',
              required: ['part_number', 'etag'],
              properties: { part_number: { type: 'integer' }, etag: { type: 'string' } },
            },
          },
        },
      },
      errors: [400, 404, 409, 413, 415, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const body = (await readJsonObject(ctx))!;
      const upload = uploadFor(svc, body.upload_id, p);
      if (upload.state !== 'open')
        throw conflict('upload_not_open', `this multipart upload is already ${upload.state}`);
      if (upload.inFlight > 0)
        throw conflict(
          'upload_not_open',
          `${upload.inFlight} part upload(s) still in progress; complete after every part PUT has answered`,
        );
      const list = body.parts;
      if (!Array.isArray(list) || list.length === 0)
        throw badRequest(
          'invalid_parameter',
          'parts must be a non-empty array of {part_number, etag}',
        );
      if (list.length > LIMITS.multipartMaxParts)
        throw badRequest('too_many_parts', `at most ${LIMITS.multipartMaxParts} parts per upload`);
      const chosen: { n: number; size: number; path: string }[] = [];
      let previous = 0;
      const seenEtags = new Set<string>();
      for (const item of list as unknown[]) {
        const e = (typeof item === 'object' && item !== null ? item : {}) as Record<
          string,
          unknown
        >;
        const n = e.part_number;
        if (typeof n !== 'number' || !Number.isInteger(n) || typeof e.etag !== 'string') {
          throw badRequest(
            'invalid_parameter',
            'each part needs an integer part_number and a string etag',
          );
        }
        if (n <= previous)
          throw badRequest(
            'invalid_part_order',
            `part numbers must be unique and ascending; ${n} follows ${previous}`,
          );
        previous = n;
        const part = upload.parts.get(n);
        if (!part) throw badRequest('invalid_part', `part ${n} was never uploaded`);
        const etag = normalizeEtag(e.etag);
        if (seenEtags.has(etag))
          throw badRequest(
            'invalid_part',
            `ETag given for part ${n} was already given for another part`,
          );
        seenEtags.add(etag);
        if (etag !== part.etag)
          throw badRequest(
            'invalid_part',
            `ETag for part ${n} does not match the stored part (stale, reused or from another part)`,
          );
        chosen.push({ n, size: part.size, path: part.path });
      }
      chosen.slice(0, -1).forEach((c) => {
        if (c.size < LIMITS.chunkMinBytes) {
          throw badRequest(
            'part_too_small',
            `part ${c.n} holds ${c.size} bytes; every part except the last needs at least ${LIMITS.chunkMinBytes} bytes (5 MB)`,
          );
        }
      });
      const total = chosen.reduce((a, c) => a + c.size, 0);
      if (total > LIMITS.maxStudyBytes)
        throw new SandboxError(
          413,
          'study_too_large',
          `the parts add up to ${total} bytes, over the 10 GB study limit`,
        );
      const order = state.byOrderId(upload.orderId, p);
      if (lifecycle.isTerminal(order))
        throw conflict('order_terminal', `order is ${order.status}; it accepts no upload`);
      const dir = join(svc.dirs.objects, order.orderId);
      await mkdir(dir, { recursive: true });
      const target = join(dir, `multipart-${upload.uploadId}.bin`);
      upload.state = 'completed';
      try {
        await concatenateParts(
          chosen.map((c) => c.path),
          target,
        );
        const intake = await inspectStudyObject(target, 'uploaded object');
        await lifecycle.completeUpload(order, intake, [target]);
      } catch (err) {
        upload.state = 'aborted';
        await rm(target, { force: true });
        throw err;
      } finally {
        await rm(join(svc.dirs.uploads, upload.uploadId), { recursive: true, force: true });
        upload.parts.clear();
      }
      sendJson(ctx.res, 200, { order_id: order.orderId, status: order.status });
    },
  });

  router.add({
    method: 'POST',
    path: '/upload/multipart/abort',
    doc: {
      summary: 'Aborts a multipart upload',
      permission: 'write',
      body: 'json',
      errors: [400, 404, 409, 415, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const body = (await readJsonObject(ctx))!;
      const upload = uploadFor(svc, body.upload_id, p);
      if (upload.state !== 'open')
        throw conflict('upload_not_open', `this multipart upload is already ${upload.state}`);
      upload.state = 'aborted';
      upload.parts.clear();
      await rm(join(svc.dirs.uploads, upload.uploadId), { recursive: true, force: true });
      sendJson(ctx.res, 200, { upload_id: upload.uploadId, aborted: true });
    },
  });

  router.add({
    method: 'GET',
    path: '/status',
    doc: {
      summary: 'Current status of an order',
      permission: 'read',
      query: [orderIdQuery, studyUidQuery],
      errors: [400, 404, ...ERR_AUTH],
    },
    handle: async (ctx, p) => sendJson(ctx.res, 200, statusBody(svc, locate(svc, ctx, p, true))),
  });

  router.add({
    method: 'GET',
    path: '/list-orders',
    doc: {
      summary:
        "Active orders of the caller's profile (own orders; organization admins: the organization's)",
      permission: 'read',
      errors: ERR_AUTH,
    },
    handle: async (ctx, p) => {
      const orders = state
        .visibleOrders(p)
        .filter((o) => !lifecycle.isTerminal(o))
        .sort((a, b) => a.createdAt - b.createdAt || a.seq - b.seq)
        .map((o) => ({
          order_id: o.orderId,
          study_uid: studyUidOf(o),
          status: o.status,
          created_at: clock.iso(o.createdAt),
          updated_at: clock.iso(o.updatedAt),
          batch_id: o.batchId,
        }));
      sendJson(ctx.res, 200, { orders });
    },
  });

  router.add({
    method: 'GET',
    path: '/results',
    doc: {
      summary: 'The results report of a delivered order',
      permission: 'read',
      query: [
        orderIdQuery,
        studyUidQuery,
        { name: 'report_type', required: true, enum: REPORT_TYPES },
      ],
      responseContent: 'document',
      errors: [400, 404, 409, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const order = locate(svc, ctx, p, true);
      const type = oneOf<ReportType>(ctx.query.get('report_type'), REPORT_TYPES, 'report_type');
      if (order.status === 'EXPIRED')
        throw conflict(
          'report_not_available',
          'order expired; its results can no longer be retrieved',
        );
      if (order.status !== 'DELIVERED')
        throw conflict(
          'report_not_available',
          `order is ${order.status}; results exist once it is DELIVERED`,
        );
      sendDocument(
        ctx.res,
        200,
        CONTENT_TYPES[type],
        renderDocument(
          resultsDocument(order, (ms) => clock.iso(ms)),
          type,
        ),
      );
    },
  });

  router.add({
    method: 'GET',
    path: '/failure-report',
    doc: {
      summary: 'The failure report of a failed order (QC rejections have none)',
      permission: 'read',
      query: [
        orderIdQuery,
        studyUidQuery,
        { name: 'report_type', required: true, enum: FAILURE_REPORT_TYPES },
      ],
      responseContent: 'document',
      errors: [400, 404, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const order = locate(svc, ctx, p, true);
      const type = oneOf<FailureReportType>(
        ctx.query.get('report_type'),
        FAILURE_REPORT_TYPES,
        'report_type',
      );
      if (!order.failure) {
        const why =
          order.status === 'QC_FAILED'
            ? 'QC rejections produce no failure report; see GET /qc-report'
            : `order is ${order.status} and has no failure report`;
        throw notFound('report_not_available', why);
      }
      sendDocument(
        ctx.res,
        200,
        CONTENT_TYPES[type],
        renderDocument(
          failureDocument(order, (ms) => clock.iso(ms)),
          type,
        ),
      );
    },
  });

  router.add({
    method: 'GET',
    path: '/qc-report',
    doc: {
      summary: 'QC report; header X-QC-Round names the round returned',
      permission: 'read',
      query: [
        { ...orderIdQuery, required: true },
        { name: 'report_type', required: true, enum: QC_REPORT_TYPES },
        { name: 'round', enum: QC_ROUNDS, description: 'default latest' },
      ],
      errors: [400, 404, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const order = locate(svc, ctx, p, false);
      const type = oneOf<QcReportType>(
        ctx.query.get('report_type'),
        QC_REPORT_TYPES,
        'report_type',
      );
      const round = oneOf<QcRound>(ctx.query.get('round'), QC_ROUNDS, 'round', 'latest');
      if (order.qcRounds.length === 0)
        throw notFound(
          'qc_round_not_available',
          `QC has not run for this order yet (status ${order.status})`,
        );
      const record =
        round === 'latest'
          ? order.qcRounds[order.qcRounds.length - 1]
          : order.qcRounds.find((r) => r.round === round);
      if (!record) throw notFound('qc_round_not_available', `this order has no ${round} QC round`);
      sendJson(
        ctx.res,
        200,
        qcReportBody(order, record, type, (ms) => clock.iso(ms)),
        { [QC_ROUND_HEADER]: record.round },
      );
    },
  });

  router.add({
    method: 'PATCH',
    path: '/qc-bypass',
    doc: {
      summary: 'Records (or withdraws) a QC bypass request',
      permission: 'write',
      query: [{ ...orderIdQuery, required: true }],
      body: 'json-optional',
      bodySchema: {
        type: 'object',
        properties: { reason: { type: 'string', maxLength: 1000 }, withdraw: { type: 'boolean' } },
      },
      errors: [400, 404, 409, 415, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const order = locate(svc, ctx, p, false);
      const body = (await readJsonObject(ctx, true)) ?? {};
      const reason = body.reason;
      if (
        reason !== undefined &&
        reason !== null &&
        (typeof reason !== 'string' || reason.length > 1000)
      ) {
        throw badRequest('invalid_parameter', 'reason must be a string of at most 1000 characters');
      }
      if (body.withdraw !== undefined && typeof body.withdraw !== 'boolean')
        throw badRequest('invalid_parameter', 'withdraw must be a boolean');
      if (body.withdraw === true) lifecycle.withdrawBypass(order);
      else lifecycle.requestBypass(order, typeof reason === 'string' ? reason : null, p.clientId);
      sendJson(ctx.res, 200, {
        order_id: order.orderId,
        bypass_requested: order.bypass?.state === 'pending',
        status: order.status,
      });
    },
  });

  router.add({
    method: 'PATCH',
    path: '/cancel-order',
    doc: {
      summary: 'Cancels an order in progress; permanent',
      permission: 'write',
      query: [{ ...orderIdQuery, required: true }],
      errors: [400, 404, 409, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const order = locate(svc, ctx, p, false);
      lifecycle.cancel(order);
      // Cancel is permanent: open multipart uploads of the order end too (freeing their slots).
      for (const upload of state.uploads.values()) {
        if (upload.orderId !== order.orderId || upload.state !== 'open') continue;
        upload.state = 'aborted';
        upload.parts.clear();
        await rm(join(svc.dirs.uploads, upload.uploadId), { recursive: true, force: true });
      }
      sendJson(ctx.res, 200, { order_id: order.orderId, status: order.status });
    },
  });

  router.add({
    method: 'POST',
    path: '/new-batch',
    doc: {
      summary: 'Creates a batch (study group); its id is the only way to the aggregated report',
      permission: 'write',
      body: 'json-optional',
      bodySchema: {
        type: 'object',
        properties: { products: { type: 'array', items: { type: 'string' } } },
      },
      successStatus: 201,
      errors: [400, 415, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const body = (await readJsonObject(ctx, true)) ?? {};
      const products =
        body.products === undefined
          ? [...DEFAULT_PRODUCTS]
          : (validateMetadata({ products: body.products }, false).products as string[]);
      const batchId = randomUUID();
      state.batches.set(batchId, {
        batchId,
        organizationId: p.organizationId,
        createdAt: clock.now(),
        products,
        orderIds: [],
      });
      sendJson(ctx.res, 201, { batch_id: batchId, products });
    },
  });

  router.add({
    method: 'PATCH',
    path: '/associate-order-to-batch',
    doc: {
      summary: 'Attaches an order to a batch; fails on a products-list mismatch',
      permission: 'write',
      query: [
        { ...orderIdQuery, required: true },
        { name: 'batch_id', required: true },
      ],
      errors: [400, 404, 409, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const order = locate(svc, ctx, p, false);
      const batchId = requireUuid(
        ctx.query.get('batch_id') ?? ctx.query.get('study_group'),
        'batch_id',
      );
      const batch = state.batches.get(batchId);
      if (!batch || batch.organizationId !== p.organizationId)
        throw notFound('batch_not_found', `no batch ${batchId}`);
      const products = productsOf(metadataOf(order));
      if (!sameProducts(products, batch.products)) {
        throw conflict(
          'products_mismatch',
          `order products [${products.join(', ')}] differ from the batch products [${batch.products.join(', ')}]`,
        );
      }
      if (order.batchId && order.batchId !== batchId) {
        const old = state.batches.get(order.batchId);
        if (old) old.orderIds = old.orderIds.filter((id) => id !== order.orderId);
      }
      if (!batch.orderIds.includes(order.orderId)) batch.orderIds.push(order.orderId);
      order.batchId = batchId;
      sendJson(ctx.res, 200, { order_id: order.orderId, batch_id: batchId });
    },
  });

  router.add({
    method: 'GET',
    path: '/report',
    doc: {
      summary: 'Aggregated report of a batch',
      permission: 'read',
      query: [
        { name: 'study_group', required: true, description: 'batch UUIDv4' },
        { name: 'report_type', required: true, enum: REPORT_TYPES },
      ],
      responseContent: 'document',
      errors: [400, 404, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const batchId = requireUuid(ctx.query.get('study_group'), 'study_group');
      const type = oneOf<ReportType>(ctx.query.get('report_type'), REPORT_TYPES, 'report_type');
      const batch = state.batches.get(batchId);
      if (!batch || batch.organizationId !== p.organizationId)
        throw notFound('batch_not_found', `no batch ${batchId}`);
      const visible = new Set(state.visibleOrders(p).map((o) => o.orderId));
      const orders = batch.orderIds
        .filter((id) => visible.has(id))
        .map((id) => state.orders.get(id)!);
      sendDocument(
        ctx.res,
        200,
        CONTENT_TYPES[type],
        renderDocument(
          batchDocument(batch, orders, (ms) => clock.iso(ms)),
          type,
        ),
      );
    },
  });

  router.add({
    method: 'GET',
    path: '/products',
    doc: {
      summary: 'Products with UDI and fda_desc (null when unassigned)',
      permission: 'read',
      errors: ERR_AUTH,
    },
    handle: async (ctx) => sendJson(ctx.res, 200, { products: SANDBOX_PRODUCTS }),
  });

  router.add({
    method: 'GET',
    path: '/recent-activity',
    doc: { summary: 'Recent status changes, camelCase keys', permission: 'read', errors: ERR_AUTH },
    handle: async (ctx, p) => {
      const activity = state
        .visibleOrders(p)
        .flatMap((o) => o.history.map((h) => ({ o, h })))
        .sort((a, b) => b.h.at - a.h.at || b.h.seq - a.h.seq)
        .slice(0, 200)
        .map(({ o, h }) => ({
          orderId: o.orderId,
          studyUid: studyUidOf(o),
          status: h.status,
          statusDesc: STATUS_DESCRIPTIONS[h.status],
          failureReason: h.failureReason,
          timestamp: clock.iso(h.at),
        }));
      sendJson(ctx.res, 200, { activity });
    },
  });

  router.add({
    method: 'GET',
    path: '/reports',
    doc: {
      summary: 'Reports of the organization not yet acknowledged',
      permission: 'read',
      query: [{ name: 'organizationId', required: true }],
      errors: [400, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      requireOwnOrganization(ctx, p);
      const reports = visibleReports(svc, p)
        .filter((r) => !r.acknowledged)
        .sort((a, b) => a.createdAt - b.createdAt)
        .map((r) => {
          const o = state.orders.get(r.orderId)!;
          return {
            report_id: r.reportId,
            order_id: r.orderId,
            study_uid: studyUidOf(o),
            status: o.status,
            kind: r.kind,
            report_types:
              r.kind === 'results'
                ? REPORT_TYPES
                : r.kind === 'failure'
                  ? FAILURE_REPORT_TYPES
                  : QC_REPORT_TYPES,
            created_at: clock.iso(r.createdAt),
          };
        });
      sendJson(ctx.res, 200, { reports });
    },
  });
  router.add({
    method: 'POST',
    path: '/reports',
    doc: {
      summary: 'Acknowledges retrieved reports (marks them received)',
      permission: 'write',
      query: [{ name: 'organizationId', required: true }],
      body: 'json',
      bodySchema: {
        type: 'object',
        required: ['report_ids'],
        properties: { report_ids: { type: 'array', items: { type: 'string' } } },
      },
      errors: [400, 415, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      requireOwnOrganization(ctx, p);
      const body = (await readJsonObject(ctx))!;
      const ids = body.report_ids;
      if (!Array.isArray(ids) || ids.some((x) => typeof x !== 'string'))
        throw badRequest('invalid_parameter', 'report_ids must be an array of strings');
      const mine = new Map(visibleReports(svc, p).map((r) => [r.reportId, r]));
      let acknowledged = 0;
      const unknown: string[] = [];
      for (const id of ids as string[]) {
        const r = mine.get(id);
        if (!r) unknown.push(id);
        else if (!r.acknowledged) {
          r.acknowledged = true;
          acknowledged++;
        }
      }
      sendJson(ctx.res, 200, { acknowledged, unknown });
    },
  });

  const agentId = (value: unknown): string => {
    if (typeof value !== 'string' || !/^[A-Za-z0-9._-]{1,64}$/.test(value))
      throw badRequest(
        'invalid_parameter',
        'agent_id must be 1-64 characters of letters, digits, ".", "_" or "-"',
      );
    return value;
  };

  router.add({
    method: 'POST',
    path: '/agent/heartbeat',
    doc: {
      summary:
        'Agent heartbeat (registers the Agent); returns pending QC bypass requests to apply locally',
      permission: 'write',
      body: 'json',
      bodySchema: {
        type: 'object',
        required: ['agent_id'],
        properties: { agent_id: { type: 'string' } },
      },
      errors: [400, 415, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const id = agentId((await readJsonObject(ctx))!.agent_id);
      state.agents.set(`${p.organizationId}/${id}`, {
        agentId: id,
        organizationId: p.organizationId,
        lastHeartbeatAt: clock.now(),
      });
      const pending = state
        .visibleOrders(p)
        .filter((o) => o.bypass?.state === 'pending')
        .map((o) => ({
          order_id: o.orderId,
          study_uid: studyUidOf(o),
          reason: o.bypass!.reason,
          requested_at: clock.iso(o.bypass!.requestedAt),
        }));
      sendJson(ctx.res, 200, {
        agent_id: id,
        server_time: clock.iso(),
        pending_qc_bypass_requests: pending,
      });
    },
  });

  router.add({
    method: 'POST',
    path: '/agent/reports',
    doc: {
      summary: 'Synchronizes QC and failure reports from a registered Agent',
      permission: 'write',
      body: 'json',
      bodySchema: {
        type: 'object',
        required: ['agent_id', 'reports'],
        properties: {
          agent_id: { type: 'string' },
          reports: {
            type: 'array',
            items: {
              type: 'object',
              required: ['order_id', 'kind', 'content'],
              properties: {
                order_id: { type: 'string' },
                kind: { enum: ['qc', 'failure'] },
                round: { enum: ['original', 'corrected'] },
                content: { type: 'object' },
              },
            },
          },
        },
      },
      errors: [400, 403, 415, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const body = (await readJsonObject(ctx))!;
      const id = agentId(body.agent_id);
      if (!state.agents.has(`${p.organizationId}/${id}`)) {
        throw new SandboxError(
          403,
          'agent_not_registered',
          `agent "${id}" is not registered; send POST /agent/heartbeat first`,
        );
      }
      if (!Array.isArray(body.reports) || body.reports.length === 0)
        throw badRequest('invalid_parameter', 'reports must be a non-empty array');
      if (body.reports.length > 1000)
        throw badRequest('invalid_parameter', 'at most 1000 reports per call');
      let accepted = 0;
      const rejected: { order_id: unknown; reason: string }[] = [];
      for (const item of body.reports as unknown[]) {
        const r = (typeof item === 'object' && item !== null ? item : {}) as Record<
          string,
          unknown
        >;
        const reject = (reason: string): void => {
          rejected.push({ order_id: r.order_id ?? null, reason });
        };
        if (typeof r.order_id !== 'string' || !UUID_V4.test(r.order_id)) {
          reject('order_id must be a UUIDv4');
          continue;
        }
        const order = state.orders.get(r.order_id.toLowerCase());
        if (!order || order.organizationId !== p.organizationId) {
          reject('unknown order');
          continue;
        }
        if (typeof r.content !== 'object' || r.content === null || Array.isArray(r.content)) {
          reject('content must be a JSON object');
          continue;
        }
        const content = r.content as Record<string, unknown>;
        if (r.kind === 'qc') {
          const round = r.round ?? 'original';
          if (round !== 'original' && round !== 'corrected') {
            reject('round must be original or corrected');
            continue;
          }
          if (
            !['passed', 'failed', 'bypassed'].includes(content.verdict as string) ||
            !Array.isArray(content.checks)
          ) {
            reject('a QC report needs verdict (passed, failed or bypassed) and a checks array');
            continue;
          }
          const record = order.qcRounds.find((q) => q.round === round);
          if (!record) {
            reject(`the order has no ${round} QC round to synchronize`);
            continue;
          }
          if (order.bypass?.state === 'pending') {
            reject(
              'the QC review of this order is open (bypass request pending); its QC report cannot be replaced',
            );
            continue;
          }
          record.agentContent = {
            verdict: content.verdict,
            checks: content.checks,
            note: typeof content.note === 'string' ? content.note : null,
            agent_id: id,
          };
          accepted++;
        } else if (r.kind === 'failure') {
          if (!order.failure) {
            reject(
              `order is ${order.status}; only FAILED or PREPROCESSING_FAILED orders have failure reports`,
            );
            continue;
          }
          if (typeof content.reason !== 'string' || content.reason === '') {
            reject('a failure report needs a non-empty reason');
            continue;
          }
          order.agentFailure = { ...content, agent_id: id };
          accepted++;
        } else {
          reject('kind must be qc or failure');
        }
      }
      sendJson(ctx.res, 200, { accepted, rejected });
    },
  });
}
