import { ACQUIRE_STUDY_JOB } from '../domain/study-acquirer.port';

/** Jobs of the lifecycle beyond the three the intake enqueues (ORDER_JOBS). */
export const LIFECYCLE_JOBS = {
  acquire: ACQUIRE_STUDY_JOB,
  upload: 'order.upload-study',
  fetchDocuments: 'order.fetch-documents',
  fetchBatchReport: 'order.fetch-batch-report',
  /** Every minute, once per cluster: deadlines, lapsed upload leases, the poll cycle when due. */
  tick: 'order.lifecycle-tick',
} as const;
