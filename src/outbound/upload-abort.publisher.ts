import { ImagingClientError } from '../imaging-client/imaging-client.error';
import { DESTINATIONS } from './outbound.settings';
import type { DeliveryResult, OutboxItem, Publisher } from './publisher';

/** The outbox kind of a multipart upload's abort (destination `imaging-upstream`). */
export const UPLOAD_ABORT_KIND = 'multipart-abort';

/** What a `multipart-abort` row carries: the upstream's ids, nothing of the patient. */
export interface UploadAbortPayload {
  upstreamOrderId: string;
  uploadId: string;
}

/** `POST /upload/multipart/abort` of the imaging client (its retries, limits, token). */
export type AbortMultipart = (uploadId: string, orderId?: string) => Promise<unknown>;

/**
 * Aborts a multipart upload whose order ended here, as an outbox row: a 5xx, a timeout, a
 * refused token or 429 is tried again with the outbox's backoff and dead-lettered after
 * OUTBOUND_MAX_ATTEMPTS (audit page, ALERT_WEBHOOK_URL, replayable), so an upload that will
 * never be completed is not left open upstream for good (contract, uploads: "complete, or
 * abort if the upload cannot be finished"). An answer that the upload is no longer open is
 * the end wanted: 404 (the upstream no longer knows it) and 409 (already aborted, by the
 * upstream's cancel of the order, or completed) are done. A 410 is not "gone" here: the
 * client reads it as the API retired (all calls stopped until a migration), so the row waits
 * and is tried again. 400/403 say the request itself is wrong: dead at once, not repeated.
 */
export class UploadAbortPublisher implements Publisher {
  readonly destination = DESTINATIONS.upstream;

  constructor(private readonly abort: AbortMultipart) {}

  deliver(): Promise<DeliveryResult> {
    return Promise.resolve({
      outcome: 'dead',
      answer: 'an upstream row carries its own payload (deliverPayload)',
      detail: {},
    });
  }

  async deliverPayload(item: OutboxItem, payload: unknown): Promise<DeliveryResult> {
    const p = payload as Partial<UploadAbortPayload>;
    if (item.kind !== UPLOAD_ABORT_KIND || !p.uploadId || !p.upstreamOrderId) {
      return {
        outcome: 'dead',
        answer: `not an upload abort this adapter knows (${item.kind})`,
        detail: { kind: item.kind },
      };
    }
    try {
      await this.abort(p.uploadId, p.upstreamOrderId);
      return { outcome: 'delivered', answer: 'aborted', detail: { uploadId: p.uploadId } };
    } catch (error) {
      return abortFailure(error, p.uploadId);
    }
  }

  async close(): Promise<void> {}
}

const ALREADY_GONE = new Set(['not_found', 'conflict']);
/** Not about the request: another try may succeed (like isTransient of the lifecycle's jobs). */
const RETRY_LATER = new Set(['retired', 'unauthorized', 'redirected']);

function abortFailure(error: unknown, uploadId: string): DeliveryResult {
  if (!(error instanceof ImagingClientError)) {
    return {
      outcome: 'retry',
      answer: `abort failed: ${(error as Error).name}`,
      detail: { uploadId },
    };
  }
  // Our words and the upstream's error code only: its message may echo what we sent.
  const upstreamCode = (error.upstreamError as { error?: unknown } | undefined)?.error;
  const said = `${error.code}${error.status ? ` (HTTP ${error.status})` : ''}${
    typeof upstreamCode === 'string' && /^[a-z_]{1,64}$/.test(upstreamCode)
      ? `: ${upstreamCode}`
      : ''
  }`;
  const detail = { uploadId, code: error.code, ...(error.status ? { status: error.status } : {}) };
  if (ALREADY_GONE.has(error.code)) {
    return {
      outcome: 'delivered',
      answer: `already gone upstream, nothing to abort (${said})`,
      detail,
    };
  }
  if (error.transient || RETRY_LATER.has(error.code)) {
    return {
      outcome: 'retry',
      answer: said,
      detail,
      ...(error.retryAfterMs !== undefined ? { retryAfterMs: error.retryAfterMs } : {}),
    };
  }
  return { outcome: 'dead', answer: `refused: ${said}`, detail };
}
