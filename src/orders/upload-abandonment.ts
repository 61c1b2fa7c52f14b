import type { EntityManager } from 'typeorm';
import { UploadProgressRepository } from '../persistence/imaging-upload.repository';
import type { OrderEvents } from './order-events';

/**
 * Hands the abort of a multipart upload that will never be completed to the outbox (kind
 * `multipart-abort`: retried with backoff, dead-lettered where an analyst sees it), in the
 * caller's transaction, and drops its progress with it. The contract asks of every upload
 * "complete, or abort if the upload cannot be finished"; one call that fails once would
 * leave it open upstream for good. With `uploadId` the row is written for that upload
 * (known to the caller); without, for the order's upload in progress, if any. Returns
 * whether a row was written: false when there was no upload, or publishing is disabled on
 * this replica (the caller then aborts once, best effort).
 */
export async function queueUploadAbort(
  manager: EntityManager,
  events: OrderEvents,
  upload: { orderId: string; upstreamOrderId: string; uploadId?: string },
): Promise<boolean> {
  const progress = new UploadProgressRepository(manager);
  const uploadId = upload.uploadId ?? (await progress.find(upload.upstreamOrderId))?.upload_id;
  if (!uploadId) return false;
  const queued = await events.uploadAbandoned(manager, {
    orderId: upload.orderId,
    upstreamOrderId: upload.upstreamOrderId,
    uploadId,
  });
  if (queued) await progress.delete(upload.upstreamOrderId);
  return queued;
}
