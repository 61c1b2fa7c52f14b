import type { Logger } from 'pino';
import type { Clock } from '../../domain/clock';
import type { DataSource } from 'typeorm';
import type { ProductionImagingClient } from '../../imaging-client/imaging-client.factory';
import type { JobQueue } from '../../jobs/job-queue';
import type { OrderDocumentRepository } from '../../persistence/order-document.repository';
import type { OrderRepository } from '../../persistence/order.repository';
import type { UploadLeaseRepository } from '../../persistence/upload-lease.repository';
import type { UpstreamBatchRepository } from '../../persistence/upstream-batch.repository';
import type { StudyAcquirer } from '../../domain/study-acquirer.port';
import type { OrderEvents } from '../order-events';

export interface LifecycleSettings {
  studyDeadlineMs: number;
  upstreamStuckMs: number;
  leaseMs: number;
  sandboxOutcomeFromNotes: boolean;
}

/** What the lifecycle's use cases share (built once by OrderLifecycleService). */
export interface LifecycleDeps {
  dataSource: DataSource;
  jobs: JobQueue;
  imaging: ProductionImagingClient;
  acquirer: StudyAcquirer;
  events: OrderEvents;
  logger: Logger;
  settings: LifecycleSettings;
  orders: OrderRepository;
  batches: UpstreamBatchRepository;
  documents: OrderDocumentRepository;
  uploadLease: UploadLeaseRepository;
  /** Identifies this process in upload leases. */
  workerId: string;
  /** The time decisions are made at (deadlines, retry and hold times). */
  clock: Clock;
}
