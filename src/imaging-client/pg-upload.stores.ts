import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import {
  systemClock,
  type Clock,
  type MultipartProgress,
  type UploadedPart,
  type UploadProgressStore,
  type UploadSlots,
} from './ports';

interface ProgressRow {
  order_id: string;
  upload_id: string;
  organization_id: string;
  size_bytes: string;
  part_size_bytes: string;
  part_count: number;
  file_fingerprint: string;
  parts: Record<string, string>;
}

function fromRow(row: ProgressRow): MultipartProgress {
  return {
    orderId: row.order_id,
    uploadId: row.upload_id,
    organizationId: row.organization_id,
    sizeBytes: Number(row.size_bytes),
    partSizeBytes: Number(row.part_size_bytes),
    partCount: row.part_count,
    fileFingerprint: row.file_fingerprint,
    parts: Object.entries(row.parts)
      .map(([n, etag]) => ({ partNumber: Number(n), etag }))
      .sort((a, b) => a.partNumber - b.partNumber),
  };
}

/** Multipart progress in PostgreSQL (table imaging_upload_progress): survives restarts, shared by replicas. */
export class PgUploadProgressStore implements UploadProgressStore {
  constructor(private readonly dataSource: DataSource) {}

  async load(orderId: string): Promise<MultipartProgress | null> {
    const rows: ProgressRow[] = await this.dataSource.query(
      'SELECT * FROM imaging_upload_progress WHERE order_id = $1',
      [orderId],
    );
    return rows[0] ? fromRow(rows[0]) : null;
  }

  async begin(p: Omit<MultipartProgress, 'parts'>): Promise<void> {
    await this.dataSource.query(
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

  async recordPart(orderId: string, uploadId: string, part: UploadedPart): Promise<void> {
    // jsonb merge in one statement: parts finishing concurrently never overwrite each other.
    await this.dataSource.query(
      `UPDATE imaging_upload_progress
          SET parts = parts || jsonb_build_object($3::text, $4::text), updated_at = now()
        WHERE order_id = $1 AND upload_id = $2`,
      [orderId, uploadId, String(part.partNumber), part.etag],
    );
  }

  async delete(orderId: string): Promise<void> {
    await this.dataSource.query('DELETE FROM imaging_upload_progress WHERE order_id = $1', [
      orderId,
    ]);
  }

  async listUnfinished(): Promise<MultipartProgress[]> {
    const rows: ProgressRow[] = await this.dataSource.query(
      'SELECT * FROM imaging_upload_progress ORDER BY started_at',
    );
    return rows.map(fromRow);
  }
}

/**
 * Upload slots per organization shared by replicas: leases in imaging_upload_slots, taken
 * under an advisory lock and renewed while the upload runs, so a crashed replica's slots
 * come back when their lease lapses.
 */
export class PgUploadSlots implements UploadSlots {
  constructor(
    private readonly dataSource: DataSource,
    private readonly options: { limit: number; leaseMs?: number; pollMs?: number; clock?: Clock },
  ) {}

  async acquire(organizationId: string): Promise<() => Promise<void>> {
    const leaseMs = this.options.leaseMs ?? 120_000;
    const clock = this.options.clock ?? systemClock;
    const holder = randomUUID();
    for (;;) {
      const rows: Array<{ ok: boolean }> = await this.dataSource.query(
        'SELECT imaging_upload_slot_acquire($1, $2, $3, $4) AS ok',
        [organizationId, holder, this.options.limit, leaseMs],
      );
      if (rows[0]?.ok) break;
      await clock.sleep((this.options.pollMs ?? 1_000) + Math.floor(Math.random() * 250));
    }
    const renew = setInterval(
      () => {
        this.dataSource
          .query(
            `UPDATE imaging_upload_slots SET expires_at = clock_timestamp() + $3 * interval '1 millisecond'
            WHERE organization_id = $1 AND holder = $2`,
            [organizationId, holder, leaseMs],
          )
          .catch(() => undefined);
      },
      Math.max(50, Math.floor(leaseMs / 3)),
    );
    renew.unref();
    let released = false;
    return async () => {
      if (released) return;
      released = true;
      clearInterval(renew);
      await this.dataSource.query(
        'DELETE FROM imaging_upload_slots WHERE organization_id = $1 AND holder = $2',
        [organizationId, holder],
      );
    };
  }
}
