import type { MultipartProgress } from '../imaging-client/ports';
import { RepositoryBase } from './repository-base';

/**
 * SQL of the upstream uploads' shared state: multipart progress (imaging_upload_progress,
 * survives restarts, shared by replicas) and upload slot leases per organization
 * (imaging_upload_slots, taken by imaging_upload_slot_acquire under an advisory lock).
 * imaging-client/pg-upload.stores.ts adapts them to the client's ports.
 */

/** A row of imaging_upload_progress (`parts`: part number → ETag). */
export interface UploadProgressRow {
  order_id: string;
  upload_id: string;
  organization_id: string;
  size_bytes: string;
  part_size_bytes: string;
  part_count: number;
  file_fingerprint: string;
  parts: Record<string, string>;
}

/** A multipart upload begun: everything but its parts. */
export type NewUploadProgress = Omit<MultipartProgress, 'parts'>;

export class UploadProgressRepository extends RepositoryBase {
  async find(orderId: string): Promise<UploadProgressRow | undefined> {
    const rows: UploadProgressRow[] = await this.db().query(
      'SELECT * FROM imaging_upload_progress WHERE order_id = $1',
      [orderId],
    );
    return rows[0];
  }

  /** Starts (or restarts, with no parts) the order's multipart upload. */
  async begin(p: NewUploadProgress): Promise<void> {
    await this.db().query(
      `INSERT INTO imaging_upload_progress
         (order_id, upload_id, organization_id, size_bytes, part_size_bytes, part_count, file_fingerprint, parts)
       VALUES ($1, $2, $3, $4, $5, $6, $7, '{}'::jsonb)
       ON CONFLICT (order_id) DO UPDATE SET
         upload_id = EXCLUDED.upload_id, organization_id = EXCLUDED.organization_id,
         size_bytes = EXCLUDED.size_bytes, part_size_bytes = EXCLUDED.part_size_bytes,
         part_count = EXCLUDED.part_count, file_fingerprint = EXCLUDED.file_fingerprint,
         parts = '{}'::jsonb, started_at = now(), updated_at = now()`,
      [
        p.orderId,
        p.uploadId,
        p.organizationId,
        p.sizeBytes,
        p.partSizeBytes,
        p.partCount,
        p.fileFingerprint,
      ],
    );
  }

  async recordPart(
    orderId: string,
    uploadId: string,
    partNumber: number,
    etag: string,
  ): Promise<void> {
    // jsonb merge in one statement: parts finishing concurrently never overwrite each other.
    await this.db().query(
      `UPDATE imaging_upload_progress
          SET parts = parts || jsonb_build_object($3::text, $4::text), updated_at = now()
        WHERE order_id = $1 AND upload_id = $2`,
      [orderId, uploadId, String(partNumber), etag],
    );
  }

  async delete(orderId: string): Promise<void> {
    await this.db().query('DELETE FROM imaging_upload_progress WHERE order_id = $1', [orderId]);
  }

  /** Every unfinished upload, oldest first. */
  async listAll(): Promise<UploadProgressRow[]> {
    return this.db().query('SELECT * FROM imaging_upload_progress ORDER BY started_at');
  }
}

export class UploadSlotRepository extends RepositoryBase {
  /** Takes a slot for `holder` when the organization has fewer than `limit` live leases. */
  async tryAcquire(
    organizationId: string,
    holder: string,
    limit: number,
    leaseMs: number,
  ): Promise<boolean> {
    const rows: Array<{ ok: boolean }> = await this.db().query(
      'SELECT imaging_upload_slot_acquire($1, $2, $3, $4) AS ok',
      [organizationId, holder, limit, leaseMs],
    );
    return Boolean(rows[0]?.ok);
  }

  /** Pushes the holder's lease forward (database clock). */
  async renew(organizationId: string, holder: string, leaseMs: number): Promise<void> {
    await this.db().query(
      `UPDATE imaging_upload_slots SET expires_at = clock_timestamp() + $3 * interval '1 millisecond'
            WHERE organization_id = $1 AND holder = $2`,
      [organizationId, holder, leaseMs],
    );
  }

  async release(organizationId: string, holder: string): Promise<void> {
    await this.db().query(
      'DELETE FROM imaging_upload_slots WHERE organization_id = $1 AND holder = $2',
      [organizationId, holder],
    );
  }
}
