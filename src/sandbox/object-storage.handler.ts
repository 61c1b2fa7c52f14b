import { createHash, createHmac, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { LIMITS } from '../imaging-spec/imaging-spec';
import { drain } from './http-router';
import { encodeObjectKey, type ObjectKey } from './presigned-url';
import type { SandboxServices } from './sandbox-services';
import type { MultipartUpload, SandboxOrder } from './sandbox-state';
import { SandboxError, badRequest, conflict, notFound } from './sandbox.error';
import { inspectStudyObject } from './study-intake';

const UPLOADED_OBJECT = 'uploaded object';

/**
 * Name used in validation failures: the file name from `Content-Disposition` (RFC 6266) when
 * the client sends one, else "uploaded object".
 */
export function objectLabel(req: IncomingMessage): string {
  const header = req.headers['content-disposition'];
  if (!header) return UPLOADED_OBJECT;
  const star = /filename\*\s*=\s*UTF-8''([^;]+)/i.exec(header);
  let name: string | undefined;
  if (star) {
    try {
      name = decodeURIComponent(star[1].trim());
    } catch {
      name = undefined;
    }
  }
  name ??=
    /filename\s*=\s*"([^"]*)"/i.exec(header)?.[1] ?? /filename\s*=\s*([^;\s]+)/i.exec(header)?.[1];
  // Control characters dropped: the name is echoed in a JSON answer and maybe shown to a person.
  const clean = [...(name ?? '')]
    .filter((ch) => ch.charCodeAt(0) >= 0x20)
    .join('')
    .slice(0, 200);
  return clean ? clean : UPLOADED_OBJECT;
}

class TooLarge extends Error {}

/** Streams a request body to `path`, never holding it whole; returns its size and MD5. */
async function streamToFile(
  req: IncomingMessage,
  path: string,
  limit: number,
): Promise<{ size: number; md5: string }> {
  const md5 = createHash('md5');
  let size = 0;
  const counter = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      size += chunk.length;
      if (size > limit) return cb(new TooLarge());
      md5.update(chunk);
      cb(null, chunk);
    },
  });
  try {
    await pipeline(req, counter, createWriteStream(path));
  } catch (err) {
    await rm(path, { force: true });
    if (err instanceof TooLarge) {
      drain(req);
      throw new SandboxError(
        413,
        'entity_too_large',
        `object is larger than the ${limit}-byte limit for this URL`,
        {},
        { Connection: 'close' },
      );
    }
    // The client went away mid-body: nothing is stored, and there is nobody left to answer.
    throw new SandboxError(
      400,
      'bad_request',
      `upload interrupted before the body was complete (${(err as Error).message})`,
    );
  }
  return { size, md5: md5.digest('hex') };
}

function makeEtag(svc: SandboxServices, key: ObjectKey, md5: string): string {
  // Unique per PUT, so that an ETag from an earlier PUT of the same part no longer matches.
  const mac = createHmac('sha256', svc.options.signingKey)
    .update(`${encodeObjectKey(key)}:${md5}:${randomBytes(8).toString('hex')}`)
    .digest('hex');
  return `"${mac.slice(0, 32)}"`;
}

export function normalizeEtag(etag: string): string {
  return etag.trim().replace(/^W\//, '').replace(/^"|"$/g, '');
}

function orderForUpload(svc: SandboxServices, orderId: string): SandboxOrder {
  const order = svc.state.orders.get(orderId);
  if (!order) throw notFound('order_not_found', 'the order of this presigned URL no longer exists');
  svc.lifecycle.assertAcceptsUpload(order);
  return order;
}

/**
 * `PUT <presigned_url>`: the object-storage side. No Authorization header is allowed: the
 * URL is the credential (contract "Authentication" 4).
 */
export async function handleStoragePut(
  svc: SandboxServices,
  req: IncomingMessage,
  res: ServerResponse,
  rawKey: string,
  query: URLSearchParams,
): Promise<void> {
  const key = svc.signer.verify(rawKey, query, svc.clock.now());
  if (req.method !== 'PUT')
    throw new SandboxError(
      403,
      'write_only',
      'presigned URLs are write-only: only PUT is allowed',
      {},
      { Allow: 'PUT' },
    );
  if (req.headers.authorization !== undefined) {
    throw badRequest(
      'authorization_not_allowed',
      'a presigned URL carries its own credential; send no Authorization header with it',
    );
  }
  const declared =
    req.headers['content-length'] !== undefined ? Number(req.headers['content-length']) : null;

  if (key.kind === 'part') {
    const upload = svc.state.uploads.get(key.uploadId);
    if (!upload) throw notFound('upload_not_found', 'this multipart upload does not exist');
    if (upload.state !== 'open')
      throw conflict('upload_not_open', `this multipart upload is ${upload.state}`);
    await putPart(svc, req, res, upload, key, declared);
    return;
  }

  const order = orderForUpload(svc, key.orderId);
  // "Limits": studies under 5 MB use single PUT, 5 MB or larger use multipart.
  const limit = LIMITS.singlePutMaxBytes - 1;
  if (declared !== null && declared > limit) {
    throw new SandboxError(
      413,
      'entity_too_large',
      `single PUT takes objects under ${LIMITS.singlePutMaxBytes} bytes (5 MB); use multipart upload for ${declared} bytes`,
      {},
      { Connection: 'close' },
    );
  }
  const org = order.organizationId;
  if (svc.state.activeUploads(org) >= svc.options.maxConcurrentUploads) {
    throw new SandboxError(
      429,
      'too_many_concurrent_uploads',
      `at most ${svc.options.maxConcurrentUploads} uploads may run at once`,
      {},
      { 'Retry-After': '30' },
    );
  }
  svc.state.inflightPuts.set(org, (svc.state.inflightPuts.get(org) ?? 0) + 1);
  const tmp = join(svc.dirs.tmp, `${randomBytes(12).toString('hex')}.part`);
  let stored: { size: number; md5: string };
  try {
    stored = await streamToFile(req, tmp, limit);
  } finally {
    svc.state.inflightPuts.set(org, (svc.state.inflightPuts.get(org) ?? 1) - 1);
  }
  if (stored.size === 0) {
    await rm(tmp, { force: true });
    throw badRequest('empty_body', 'the uploaded object is empty');
  }
  const dir = join(svc.dirs.objects, order.orderId);
  await mkdir(dir, { recursive: true });
  const path = join(dir, `${key.kind}-${key.nonce}-${randomBytes(4).toString('hex')}.bin`);
  await rename(tmp, path);
  try {
    const intake = await inspectStudyObject(path, objectLabel(req));
    if (key.kind === 'single') {
      await svc.lifecycle.completeUpload(order, intake, [path]);
    } else {
      if (!intake.studyUid)
        throw badRequest('invalid_study', 'a single instance must carry a Study Instance UID');
      // Refuse now what closing the group would refuse, so the client hears it.
      svc.lifecycle.checkUploadAllowed(order, intake.studyUid);
      const group = order.instanceGroup;
      if (group && group.studyUid !== intake.studyUid) {
        throw badRequest(
          'study_uid_mismatch',
          `this instance belongs to study ${intake.studyUid}, but the order is collecting instances of study ${group.studyUid}`,
        );
      }
      const now = svc.clock.now();
      if (group) {
        group.paths.push(path);
        group.intakes.push(intake);
        group.lastAt = now;
      } else {
        order.instanceGroup = {
          studyUid: intake.studyUid,
          paths: [path],
          intakes: [intake],
          lastAt: now,
        };
      }
    }
  } catch (err) {
    await rm(path, { force: true });
    throw err;
  }
  res.writeHead(200, { ETag: makeEtag(svc, key, stored.md5), 'Content-Length': '0' });
  res.end();
}

async function putPart(
  svc: SandboxServices,
  req: IncomingMessage,
  res: ServerResponse,
  upload: MultipartUpload,
  key: Extract<ObjectKey, { kind: 'part' }>,
  declared: number | null,
): Promise<void> {
  let others = 0;
  for (const [n, p] of upload.parts) if (n !== key.partNumber) others += p.size;
  const limit = Math.min(LIMITS.chunkMaxBytes, LIMITS.maxStudyBytes - others);
  if (declared !== null && declared > limit) {
    const code = declared > LIMITS.chunkMaxBytes ? 'entity_too_large' : 'study_too_large';
    const message =
      code === 'entity_too_large'
        ? `a part may hold at most ${LIMITS.chunkMaxBytes} bytes (100 MB)`
        : `this part would take the study over the ${LIMITS.maxStudyBytes}-byte limit`;
    throw new SandboxError(413, code, message, {}, { Connection: 'close' });
  }
  const tmp = join(svc.dirs.tmp, `${randomBytes(12).toString('hex')}.part`);
  upload.inFlight++;
  let stored: { size: number; md5: string };
  try {
    stored = await streamToFile(req, tmp, limit);
  } finally {
    upload.inFlight--;
  }
  if (stored.size === 0) {
    await rm(tmp, { force: true });
    throw badRequest('empty_body', `part ${key.partNumber} is empty`);
  }
  if (upload.state !== 'open') {
    await rm(tmp, { force: true });
    throw conflict(
      'upload_not_open',
      `this multipart upload was ${upload.state} while the part was being sent`,
    );
  }
  const dir = join(svc.dirs.uploads, upload.uploadId);
  await mkdir(dir, { recursive: true });
  const path = join(dir, `part-${key.partNumber}-${randomBytes(4).toString('hex')}`);
  await rename(tmp, path);
  const previous = upload.parts.get(key.partNumber);
  if (previous) await rm(previous.path, { force: true });
  const etag = makeEtag(svc, key, stored.md5);
  upload.parts.set(key.partNumber, { etag: normalizeEtag(etag), size: stored.size, path });
  res.writeHead(200, { ETag: etag, 'Content-Length': '0' });
  res.end();
}

/** Joins the listed parts into one object, streaming part after part. */
export async function concatenateParts(paths: string[], target: string): Promise<void> {
  const out = createWriteStream(target);
  try {
    for (const p of paths) await pipeline(createReadStream(p), out, { end: false });
  } finally {
    await new Promise<void>((resolve, reject) =>
      out.end((err?: Error | null) => (err ? reject(err) : resolve())),
    );
  }
}
