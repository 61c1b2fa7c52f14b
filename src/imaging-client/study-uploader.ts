import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { ImagingClient } from './imaging-client';
import { ImagingClientError } from './imaging-client.error';
import {
  WaitBoundExceeded,
  type ClientLogger,
  type Clock,
  type MultipartProgress,
  type UploadedPart,
  type UploadProgressStore,
  type UploadSlots,
} from './ports';
import { partNumbers, partRange, planUpload } from './upload-plan';
import { headerValue, type CallSpec, type UpstreamResponse } from './upstream-http';

export interface UploadOptions {
  /**
   * Takes over the abort of a multipart upload of the order that will never be completed,
   * and drops its progress, on a path that retries it (the outbox): resolves true when it
   * did, false to have the uploader abort it once itself.
   */
  abandon?: (uploadId: string) => Promise<boolean>;
}

export interface UploadResult {
  mode: 'single' | 'multipart';
  sizeBytes: number;
  partCount: number;
  /** Parts that were already up from an earlier run and not sent again. */
  resumedParts: number;
  uploadId?: string;
}

/** Storage answers that mean "this URL no longer works" rather than "stop": get a fresh one. */
const URL_REJECTED = new Set([401, 403, 410]);

/** When the upstream gives no `expires_at`, the contract's one hour from issue applies. */
const DEFAULT_URL_LIFETIME_MS = 60 * 60_000;

/**
 * Uploads one study file for an order: single PUT below 5 MB, multipart from 5 MB, streamed
 * from disk (never buffered whole), parts in parallel with bounded concurrency, progress
 * persisted so a restarted adapter resumes rather than starts over.
 */
/**
 * How long a complete refused as unknown or already completed waits for the order to leave
 * PENDING (a complete that went through, its answer lost) before the refusal counts.
 */
const COMPLETE_SETTLE_MS = 60_000;

export class StudyUploader {
  constructor(
    private readonly client: ImagingClient,
    private readonly deps: {
      progress: UploadProgressStore;
      slots: UploadSlots;
      clock: Clock;
      logger: ClientLogger;
    },
  ) {}

  async upload(
    orderId: string,
    filePath: string,
    options: UploadOptions = {},
  ): Promise<UploadResult> {
    const info = await stat(filePath).catch((error: unknown) => {
      throw new ImagingClientError('invalid_input', 'upload', 'the study file cannot be read', {
        cause: error,
      });
    });
    if (!info.isFile())
      throw new ImagingClientError('invalid_input', 'upload', 'the study path is not a file');
    // Refused before any upstream call (and before taking an upload slot).
    const plan = planUpload(info.size);
    const fingerprint = `${info.size}:${Math.trunc(info.mtimeMs)}`;
    const release = await this.deps.slots
      .acquire(this.client.config.organizationId)
      .catch((error: unknown) => {
        if (!(error instanceof WaitBoundExceeded)) throw error;
        // Transient: the upload job gives its worker back and tries again later.
        throw new ImagingClientError('deadline', 'upload', error.message);
      });
    try {
      if (plan.kind === 'single') {
        await this.singlePut(orderId, filePath, info.size);
        return { mode: 'single', sizeBytes: info.size, partCount: 1, resumedParts: 0 };
      }
      return await this.multipart(orderId, filePath, plan, fingerprint, options);
    } finally {
      await release();
    }
  }

  /** Gives up an unfinished multipart upload for good: aborted upstream, progress dropped. */
  async abandon(orderId: string): Promise<void> {
    const progress = await this.deps.progress.load(orderId);
    if (!progress) return;
    await this.abortQuietly(progress.uploadId, orderId);
    await this.deps.progress.delete(orderId);
  }

  private async singlePut(orderId: string, filePath: string, sizeBytes: number): Promise<void> {
    try {
      await this.singlePutAttempts(orderId, filePath, sizeBytes);
    } catch (error) {
      // A PUT that went through but whose answer was lost, then retried, finds the order
      // already processing and is refused (409): the order having left PENDING shows the
      // first PUT landed.
      if (
        error instanceof ImagingClientError &&
        error.code === 'conflict' &&
        (error.attempts ?? 1) > 1
      ) {
        const { status } = await this.client.getStatus({ orderId });
        if (status !== 'PENDING') return;
      }
      throw error;
    }
  }

  private async singlePutAttempts(
    orderId: string,
    filePath: string,
    sizeBytes: number,
  ): Promise<void> {
    let current = await this.freshSingleUrl(orderId);
    await this.storagePut({
      operation: 'upload-single-put',
      orderId,
      presignedUrl: async () => {
        if (
          current.expiresAt - this.deps.clock.now() <
          this.client.config.upload.urlRefreshMarginMs
        ) {
          current = await this.freshSingleUrl(orderId);
        }
        return current.url;
      },
      stream: () => ({ body: createReadStream(filePath), length: sizeBytes }),
      parse: () => undefined,
      recover: async (response) => {
        if (!URL_REJECTED.has(response.status)) return false;
        current = await this.freshSingleUrl(orderId);
        return true;
      },
    });
  }

  private async freshSingleUrl(orderId: string): Promise<{ url: string; expiresAt: number }> {
    const issued = this.deps.clock.now();
    const { url, expiresAt } = await this.client.uploads.getSinglePutUrl(orderId);
    return { url, expiresAt: expiresAt ?? issued + DEFAULT_URL_LIFETIME_MS };
  }

  private async multipart(
    orderId: string,
    filePath: string,
    plan: { sizeBytes: number; partSizeBytes: number; partCount: number },
    fingerprint: string,
    options: UploadOptions,
  ): Promise<UploadResult> {
    const { progress: store, logger } = this.deps;
    let progress = await store.load(orderId);
    if (
      progress &&
      (progress.sizeBytes !== plan.sizeBytes ||
        progress.partSizeBytes !== plan.partSizeBytes ||
        progress.partCount !== plan.partCount ||
        progress.fileFingerprint !== fingerprint)
    ) {
      // The study on disk changed since the parts were sent: never stitch old and new bytes.
      // The old upload will never be completed: its abort is handed to the caller's durable
      // path when there is one (retried there), else tried once here.
      logger.warn({ orderId }, 'study changed since the unfinished upload began; starting over');
      if (!(await options.abandon?.(progress.uploadId))) {
        await this.abortQuietly(progress.uploadId, orderId);
        await store.delete(orderId);
      }
      progress = null;
    }

    let urls: UrlBook | undefined;
    if (progress) {
      const done = new Set(progress.parts.map((p) => p.partNumber));
      const missing = partNumbers(plan.partCount).filter((n) => !done.has(n));
      try {
        urls = missing.length
          ? await this.partUrls(progress.uploadId, { partNumbers: missing }, orderId)
          : undefined;
        logger.info(
          { orderId, partsDone: done.size, partCount: plan.partCount },
          'resuming multipart upload',
        );
      } catch (error) {
        if (
          !(error instanceof ImagingClientError) ||
          !['not_found', 'conflict', 'bad_request'].includes(error.code)
        ) {
          throw error;
        }
        // The upstream no longer knows the upload (expired, aborted elsewhere): start afresh.
        logger.warn(
          { orderId, code: error.code },
          'unfinished upload unknown upstream; starting over',
        );
        await store.delete(orderId);
        progress = null;
      }
    }
    if (!progress) {
      const { uploadId } = await this.client.uploads.initiateMultipart(orderId, plan.sizeBytes);
      const fresh: Omit<MultipartProgress, 'parts'> = {
        orderId,
        uploadId,
        organizationId: this.client.config.organizationId,
        sizeBytes: plan.sizeBytes,
        partSizeBytes: plan.partSizeBytes,
        partCount: plan.partCount,
        fileFingerprint: fingerprint,
      };
      await store.begin(fresh);
      progress = { ...fresh, parts: [] };
      try {
        urls = await this.partUrls(uploadId, { count: plan.partCount }, orderId);
      } catch (error) {
        await this.failed(error, progress, options);
        throw error;
      }
    }

    const uploadId = progress.uploadId;
    const done = new Map(progress.parts.map((p) => [p.partNumber, p.etag]));
    const resumedParts = done.size;
    try {
      if (urls) await this.sendParts(orderId, uploadId, filePath, plan, done, urls);
      const parts: UploadedPart[] = [...done.entries()].map(([partNumber, etag]) => ({
        partNumber,
        etag,
      }));
      await this.complete(orderId, uploadId, parts);
      await store.delete(orderId);
      return {
        mode: 'multipart',
        sizeBytes: plan.sizeBytes,
        partCount: plan.partCount,
        resumedParts,
        uploadId,
      };
    } catch (error) {
      await this.failed(error, progress, options);
      throw error;
    }
  }

  private async complete(orderId: string, uploadId: string, parts: UploadedPart[]): Promise<void> {
    try {
      await this.client.uploads.completeMultipart(uploadId, parts, orderId);
    } catch (error) {
      // A complete that went through but whose answer was lost (then retried, or replayed after
      // a restart) is refused as unknown or already completed; the order moving on shows it did
      // complete. The service may still be assembling the object (the order stays PENDING for a
      // while), so the order is watched for a bounded time before the refusal counts.
      if (
        error instanceof ImagingClientError &&
        (error.code === 'not_found' || error.code === 'conflict') &&
        (await this.movesOnFromPending(orderId))
      )
        return;
      throw error;
    }
  }

  /**
   * Whether the order leaves PENDING for a status other than CANCELLED within
   * COMPLETE_SETTLE_MS (looks back off: 0.25 s, 0.5 s, … 5 s).
   */
  private async movesOnFromPending(orderId: string): Promise<boolean> {
    const deadline = this.deps.clock.now() + COMPLETE_SETTLE_MS;
    // at most 16 looks, whatever the clock says (a clock that stands still ends the loop too)
    for (let look = 0, wait = 250; look < 16; look++, wait = Math.min(wait * 2, 5_000)) {
      const { status } = await this.client.getStatus({ orderId });
      // CANCELLED says nothing of the upload: an order cancelled before its complete (the
      // upload ended with it, hence the 409) never processed it. Taken for "moved on", the
      // refused complete counted as an upload that landed.
      if (status === 'CANCELLED') return false;
      if (status !== 'PENDING') return true;
      if (this.deps.clock.now() + wait > deadline) return false;
      await this.deps.clock.sleep(wait);
    }
    return false;
  }

  /**
   * A failure no retry will fix (bad request, invalid response, missing ETag…) aborts the
   * upload so no half-finished order lingers; a transient one keeps the progress so the next
   * attempt resumes where this one stopped. The abort goes to the caller's durable path when
   * there is one (the outbox, retried): one call that fails left the upload open upstream.
   */
  private async failed(
    error: unknown,
    progress: MultipartProgress,
    options: UploadOptions,
  ): Promise<void> {
    if (!(error instanceof ImagingClientError) || error.transient || error.code === 'retired')
      return;
    this.deps.logger.warn(
      { orderId: progress.orderId, code: error.code, operation: error.operation },
      'multipart upload failed for good; aborting it',
    );
    if (await options.abandon?.(progress.uploadId).catch(() => false)) return;
    await this.abortQuietly(progress.uploadId, progress.orderId);
    await this.deps.progress.delete(progress.orderId).catch(() => undefined);
  }

  private async abortQuietly(uploadId: string, orderId: string): Promise<void> {
    try {
      await this.client.uploads.abortMultipart(uploadId, orderId);
    } catch (error) {
      this.deps.logger.warn(
        { orderId, code: error instanceof ImagingClientError ? error.code : 'unknown' },
        'abort of multipart upload failed',
      );
    }
  }

  private async partUrls(
    uploadId: string,
    parts: { count: number } | { partNumbers: number[] },
    orderId: string,
  ): Promise<UrlBook> {
    const issued = this.deps.clock.now();
    const result = await this.client.uploads.getPartUrls(uploadId, parts, orderId);
    return { urls: result.urls, expiresAt: result.expiresAt ?? issued + DEFAULT_URL_LIFETIME_MS };
  }

  private async sendParts(
    orderId: string,
    uploadId: string,
    filePath: string,
    plan: { sizeBytes: number; partSizeBytes: number; partCount: number },
    done: Map<number, string>,
    initial: UrlBook,
  ): Promise<void> {
    const { clock } = this.deps;
    const { partConcurrency, urlRefreshMarginMs } = this.client.config.upload;
    const book = initial;
    let refreshing: Promise<void> | undefined;
    // One refresh at a time, for every part still to send; parts in flight keep their URL.
    const refresh = (force: boolean): Promise<void> => {
      if (!force && book.expiresAt - clock.now() >= urlRefreshMarginMs) return Promise.resolve();
      refreshing ??= (async () => {
        const missing = partNumbers(plan.partCount).filter((n) => !done.has(n));
        const fresh = await this.partUrls(uploadId, { partNumbers: missing }, orderId);
        for (const [n, url] of fresh.urls) book.urls.set(n, url);
        book.expiresAt = fresh.expiresAt;
      })().finally(() => {
        refreshing = undefined;
      });
      return refreshing;
    };

    const queue = partNumbers(plan.partCount).filter((n) => !done.has(n));
    let failure: unknown;
    const worker = async () => {
      while (failure === undefined) {
        const partNumber = queue.shift();
        if (partNumber === undefined) return;
        try {
          const etag = await this.putPart(orderId, filePath, plan, partNumber, book, refresh);
          done.set(partNumber, etag);
          await this.deps.progress.recordPart(orderId, uploadId, { partNumber, etag });
        } catch (error) {
          failure ??= error;
        }
      }
    };
    await Promise.all(
      Array.from({ length: Math.max(1, Math.min(partConcurrency, queue.length)) }, worker),
    );
    if (failure !== undefined) throw failure;
  }

  private putPart(
    orderId: string,
    filePath: string,
    plan: { sizeBytes: number; partSizeBytes: number },
    partNumber: number,
    book: UrlBook,
    refresh: (force: boolean) => Promise<void>,
  ): Promise<string> {
    const { start, end, length } = partRange(plan, partNumber);
    let usedUrl: string | undefined;
    return this.storagePut({
      operation: 'upload-part',
      orderId,
      presignedUrl: async () => {
        await refresh(false);
        const url = book.urls.get(partNumber);
        if (!url)
          throw new ImagingClientError(
            'invalid_response',
            'upload-part',
            `no URL for part ${partNumber}`,
          );
        usedUrl = url;
        return url;
      },
      stream: () => ({ body: createReadStream(filePath, { start, end }), length }),
      parse: (response: UpstreamResponse) => {
        const etag = headerValue(response.headers, 'etag');
        if (!etag) {
          throw new ImagingClientError(
            'invalid_response',
            'upload-part',
            `storage sent no ETag for part ${partNumber}`,
            {
              status: response.status,
            },
          );
        }
        return etag;
      },
      recover: async (response) => {
        if (!URL_REJECTED.has(response.status)) return false;
        // Expired (or otherwise refused) URL: fresh ones for all remaining parts, unless
        // another part already fetched them since this one started.
        if (book.urls.get(partNumber) === usedUrl) await refresh(true);
        return true;
      },
    });
  }

  /** A PUT of study bytes to object storage at a presigned URL: no token, the part timeout. */
  private storagePut<T>(
    spec: Omit<CallSpec<T>, 'method' | 'path' | 'auth' | 'timeoutMs'>,
  ): Promise<T> {
    return this.client.http.call({
      ...spec,
      method: 'PUT',
      path: '<presigned-url>',
      auth: 'none',
      timeoutMs: this.client.config.timeouts.uploadPartMs,
    });
  }
}

interface UrlBook {
  urls: Map<number, string>;
  expiresAt: number;
}
