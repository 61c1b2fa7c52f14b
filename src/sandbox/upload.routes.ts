import { randomBytes, randomUUID } from 'node:crypto';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { LIMITS } from '../imaging-spec/imaging-spec';
import {
  readJsonObject,
  sendJson,
  type RequestContext,
  type RouteDoc,
  type Router,
} from './http-router';
import { concatenateParts, normalizeEtag } from './object-storage.handler';
import { SandboxError, badRequest, conflict } from './sandbox.error';
import { inspectStudyObject } from './study-intake';
import {
  abortUpload,
  ERR_AUTH,
  requireUuid,
  locate,
  presignedUrl,
  releaseParts,
  requiredOrderIdQuery,
  uploadFor,
} from './route-helpers';
import type { SandboxServices } from './sandbox-services';
import { orderStatusOf } from './sandbox-state';
import type { Principal } from './token-store';

/** Upload URLs (single PUT, legacy single instance) and the multipart calls. */
export function registerUploadRoutes(router: Router, svc: SandboxServices): void {
  const { state, lifecycle, clock } = svc;
  /** Both upload-URL operations: a presigned URL of their kind for an order still open. */
  const uploadUrlRoute = (
    path: string,
    kind: 'single' | 'instance',
    doc: Pick<RouteDoc, 'summary' | 'legacy'>,
  ) =>
    router.add({
      method: 'GET',
      path,
      doc: {
        ...doc,
        permission: 'write',
        query: [requiredOrderIdQuery],
        errors: [400, 404, 409, ...ERR_AUTH],
      },
      handle: async (ctx, p) => {
        const order = locate(svc, ctx, p, false);
        lifecycle.assertAcceptsUpload(order);
        const nonce = randomBytes(12).toString('base64url');
        sendJson(ctx.res, 200, presignedUrl(svc, { kind, orderId: order.orderId, nonce }));
      },
    });
  uploadUrlRoute('/upload/single-put', 'single', {
    summary: 'Presigned write-only URL for one object (studies under 5 MB)',
  });
  uploadUrlRoute('/upload', 'instance', {
    summary:
      'Legacy: presigned URL for a single instance (DICOM or ZIP); instances of one study arriving at most 1 minute apart are processed together',
    legacy: true,
  });

  /** The JSON body and the multipart upload it names; 409 unless that upload is still open. */
  const openUploadOf = async (ctx: RequestContext, p: Principal, wording = 'is already') => {
    const body = (await readJsonObject(ctx))!;
    const upload = uploadFor(svc, body.upload_id, p);
    if (upload.state !== 'open')
      throw conflict('upload_not_open', `this multipart upload ${wording} ${upload.state}`);
    return { body, upload };
  };

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
      lifecycle.assertAcceptsUpload(order);
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
      const { body, upload } = await openUploadOf(ctx, p, 'is');
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
      const { body, upload } = await openUploadOf(ctx, p);
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
      // Contract, Limits: "Chunk size 5 MB to 100 MB", with no exception for the last part
      // (and a study under 5 MB goes as a single PUT). Every part but the last needs 5 MiB (the
      // safe reading); the last at least 5,000,000 bytes, the other reading, which a study of
      // 5,000,000 bytes up to 5 MiB (too large for a single PUT) needs for its only part.
      chosen.forEach((c, i) => {
        const last = i === chosen.length - 1;
        const min = last ? LIMITS.singlePutMaxBytes : LIMITS.chunkMinBytes;
        if (c.size < min) {
          throw badRequest(
            'part_too_small',
            `part ${c.n} holds ${c.size} bytes; every part needs at least ${LIMITS.chunkMinBytes} bytes (5 MiB), the last at least ${LIMITS.singlePutMaxBytes} (5 MB)`,
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
      lifecycle.assertAcceptsUpload(order);
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
        await releaseParts(svc, upload);
      }
      sendJson(ctx.res, 200, orderStatusOf(order));
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
      const { upload } = await openUploadOf(ctx, p);
      await abortUpload(svc, upload);
      sendJson(ctx.res, 200, { upload_id: upload.uploadId, aborted: true });
    },
  });
}
