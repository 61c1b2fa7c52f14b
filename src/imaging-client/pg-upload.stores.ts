import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import {
  UploadProgressRepository,
  type UploadProgressRow,
  UploadSlotRepository,
} from '../persistence/imaging-upload.repository';
import {
  systemClock,
  type Clock,
  type MultipartProgress,
  type UploadedPart,
  type UploadProgressStore,
  type UploadSlots,
  WaitBoundExceeded,
} from './ports';

/** How long an upload waits for a free slot before its job gives the worker back (default). */
export const UPLOAD_SLOT_MAX_WAIT_MS = 5 * 60_000;

function fromRow(row: UploadProgressRow): MultipartProgress {
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
  private readonly progress: UploadProgressRepository;

  constructor(dataSource: DataSource) {
    this.progress = new UploadProgressRepository(dataSource);
  }

  async load(orderId: string): Promise<MultipartProgress | null> {
    const row = await this.progress.find(orderId);
    return row ? fromRow(row) : null;
  }

  async begin(p: Omit<MultipartProgress, 'parts'>): Promise<void> {
    await this.progress.begin(p);
  }

  async recordPart(orderId: string, uploadId: string, part: UploadedPart): Promise<void> {
    await this.progress.recordPart(orderId, uploadId, part.partNumber, part.etag);
  }

  async delete(orderId: string): Promise<void> {
    await this.progress.delete(orderId);
  }

  async listUnfinished(): Promise<MultipartProgress[]> {
    return (await this.progress.listAll()).map(fromRow);
  }
}

/**
 * Upload slots per organization shared by replicas: leases in imaging_upload_slots, taken
 * under an advisory lock and renewed while the upload runs, so a crashed replica's slots
 * come back when their lease lapses.
 */
export class PgUploadSlots implements UploadSlots {
  private readonly slots: UploadSlotRepository;

  constructor(
    dataSource: DataSource,
    private readonly options: {
      limit: number;
      leaseMs?: number;
      pollMs?: number;
      clock?: Clock;
      /** Longest wait for a free slot (default UPLOAD_SLOT_MAX_WAIT_MS). */
      maxWaitMs?: number;
    },
  ) {
    this.slots = new UploadSlotRepository(dataSource);
  }

  async acquire(organizationId: string): Promise<() => Promise<void>> {
    const leaseMs = this.options.leaseMs ?? 120_000;
    const clock = this.options.clock ?? systemClock;
    const holder = randomUUID();
    const bound = this.options.maxWaitMs ?? UPLOAD_SLOT_MAX_WAIT_MS;
    const giveUpAt = clock.now() + bound;
    for (;;) {
      if (await this.slots.tryAcquire(organizationId, holder, this.options.limit, leaseMs)) break;
      const pause = (this.options.pollMs ?? 1_000) + Math.floor(Math.random() * 250);
      // Every slot held by long uploads (or by leases of a stuck peer): the job's worker is
      // given back and the upload tried again later, instead of waiting for ever.
      if (clock.now() + pause > giveUpAt) throw new WaitBoundExceeded('upload slot', bound);
      await clock.sleep(pause);
    }
    const renew = setInterval(
      () => {
        this.slots.renew(organizationId, holder, leaseMs).catch(() => undefined);
      },
      Math.max(50, Math.floor(leaseMs / 3)),
    );
    renew.unref();
    let released = false;
    return async () => {
      if (released) return;
      released = true;
      clearInterval(renew);
      await this.slots.release(organizationId, holder);
    };
  }
}
