/** Helpers shared by the /v1 route modules: identifiers, order lookup, common bodies. */
import { randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { LIMITS } from '../imaging-spec/imaging-spec';
import type { RequestContext } from './http-router';
import type { Metadata, MetadataValue } from './metadata-rules';
import { studyUidOf, type MultipartUpload, type SandboxOrder } from './sandbox-state';
import { SandboxError, badRequest, notFound } from './sandbox.error';
import type { SandboxServices } from './sandbox-services';
import type { Principal } from './token-store';

export const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i;
export const ERR_AUTH = [401, 403, 410, 429];

export function requireUuid(value: unknown, name: string): string {
  if (typeof value !== 'string' || value === '')
    throw badRequest('invalid_request', `${name} is required`);
  if (!UUID_V4.test(value))
    throw badRequest('invalid_parameter', `${name} must be a UUIDv4, got "${value.slice(0, 80)}"`);
  return value.toLowerCase();
}

export function oneOf<T extends string>(
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
export function locate(
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

export function statusBody(svc: SandboxServices, o: SandboxOrder): Record<string, unknown> {
  return {
    order_id: o.orderId,
    study_uid: studyUidOf(o),
    status: o.status,
    updated_at: svc.clock.iso(o.updatedAt),
  };
}

export function applyMetadata(
  order: SandboxOrder,
  patch: Record<string, MetadataValue | null>,
): void {
  const next: Metadata = { ...order.apiMetadata };
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete next[k];
    else next[k] = v;
  }
  order.apiMetadata = next;
}

export function presignedUrl(
  svc: SandboxServices,
  key: Parameters<SandboxServices['signer']['presign']>[1],
): { url: string; expires_at: string } {
  const expiresAt = svc.clock.now() + LIMITS.presignedUrlExpirySeconds * 1000;
  return {
    url: svc.signer.presign(svc.origin(), key, expiresAt),
    expires_at: svc.clock.iso(Math.floor(expiresAt / 1000) * 1000),
  };
}

export function createOrder(
  svc: SandboxServices,
  principal: Principal,
  metadata: Metadata,
): SandboxOrder {
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

export function uploadFor(svc: SandboxServices, uploadId: unknown, principal: Principal) {
  const id = requireUuid(uploadId, 'upload_id');
  const upload = svc.state.uploads.get(id);
  if (!upload || upload.organizationId !== principal.organizationId)
    throw notFound('upload_not_found', `no multipart upload ${id}`);
  svc.state.byOrderId(upload.orderId, principal); // standard users: only their own orders' uploads
  return upload;
}

/** Forgets the stored parts of a multipart upload and deletes their folder. */
export async function releaseParts(svc: SandboxServices, upload: MultipartUpload): Promise<void> {
  upload.parts.clear();
  await rm(join(svc.dirs.uploads, upload.uploadId), { recursive: true, force: true });
}

/** Ends a multipart upload for good (abort, or its order cancelled): no part counts any more. */
export async function abortUpload(svc: SandboxServices, upload: MultipartUpload): Promise<void> {
  upload.state = 'aborted';
  await releaseParts(svc, upload);
}

/** Ends every open multipart upload of an order (its parts freed, its slots given back). */
export async function abortOpenUploadsOf(svc: SandboxServices, orderId: string): Promise<void> {
  for (const upload of svc.state.uploads.values()) {
    if (upload.orderId === orderId && upload.state === 'open') await abortUpload(svc, upload);
  }
}

/**
 * Reports `GET /reports` lists and `POST /reports` acknowledges: every report of the caller's
 * organization (contract: "all reports of the organization not yet retrieved"), or, with
 * SANDBOX_REPORTS_PER_USER, only those of orders the caller sees (own orders for standard users).
 */
export function visibleReports(svc: SandboxServices, principal: Principal) {
  const inOrganization = [...svc.state.reports.values()].filter(
    (r) => r.organizationId === principal.organizationId,
  );
  if (!svc.options.reportsPerUser) return inOrganization;
  const visible = new Set(svc.state.visibleOrders(principal).map((o) => o.orderId));
  return inOrganization.filter((r) => visible.has(r.orderId));
}

const PAGE_PARAMS = ['page_token', 'cursor', 'pageToken'] as const;

/** The page-position parameters of a paged list, for the OpenAPI description. */
export const pageQuery = PAGE_PARAMS.map((name) => ({
  name,
  description: 'next-page position (only when SANDBOX_PAGE_SIZE is set; opaque)',
}));

/**
 * One page of a list answer when SANDBOX_PAGE_SIZE is set (an assumption to test clients
 * against: the contract names no paging). The position is an opaque token; how the next page
 * is named follows SANDBOX_PAGE_STYLE: `next` (an absolute URL), `links` (`links.next`, a path),
 * `cursor` (`next_cursor`, sent back as `cursor`), `page-token` (`nextPageToken`, sent back as
 * `pageToken`). The last page names none.
 */
export function paginate<T>(
  svc: SandboxServices,
  ctx: RequestContext,
  key: string,
  items: T[],
): Record<string, unknown> {
  const size = svc.options.pageSize;
  if (size === null) return { [key]: items };
  let token: string | null = null;
  for (const name of PAGE_PARAMS) token ??= ctx.query.get(name);
  let offset = 0;
  if (token !== null) {
    const decoded = /^o(\d{1,9})$/.exec(Buffer.from(token, 'base64url').toString('latin1'));
    if (!decoded) throw badRequest('invalid_parameter', 'unknown page token');
    offset = Number(decoded[1]);
  }
  const page = items.slice(offset, offset + size);
  const body: Record<string, unknown> = { [key]: page };
  if (offset + size >= items.length) return body;
  const next = Buffer.from(`o${offset + size}`, 'latin1').toString('base64url');
  const query = new URLSearchParams(ctx.query);
  for (const name of PAGE_PARAMS) query.delete(name);
  switch (svc.options.pageStyle) {
    case 'next':
      query.set('page_token', next);
      body.next = `${svc.origin()}/v1${ctx.path}?${query}`;
      break;
    case 'links':
      query.set('page_token', next);
      body.links = { next: `/v1${ctx.path}?${query}` };
      break;
    case 'cursor':
      body.next_cursor = next;
      break;
    case 'page-token':
      body.nextPageToken = next;
      break;
    default:
      return svc.options.pageStyle satisfies never;
  }
  return body;
}

export function requireOwnOrganization(ctx: RequestContext, principal: Principal): void {
  const org = ctx.query.get('organizationId');
  if (org === null || org === '')
    throw badRequest('invalid_request', 'query parameter organizationId is required');
  if (org !== principal.organizationId) {
    throw new SandboxError(403, 'forbidden', 'the token is not provisioned for this organization');
  }
}

export const orderIdQuery = { name: 'order_id', description: 'order UUIDv4 (preferred)' };
export const studyUidQuery = {
  name: 'study_uid',
  description: 'DICOM StudyInstanceUID; the most recent order wins',
};
/** The operations addressed by order_id alone (contract rule 1 does not apply to them). */
export const requiredOrderIdQuery = { ...orderIdQuery, required: true };
