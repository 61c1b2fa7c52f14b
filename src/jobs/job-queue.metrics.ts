import { Counter } from 'prom-client';
import { metricsRegistry } from '../observability/metrics';

/** Jobs unlocked because the pool that held them stopped beating (a killed process). */
export const deadWorkerJobsUnlocked = new Counter({
  name: 'adapter_jobs_unlocked_from_dead_workers_total',
  help: 'Jobs freed for another run because the worker pool that held them stopped its heartbeat',
  registers: [metricsRegistry],
});

/** Our own jobs whose end graphile-worker could not record (database away), settled by us. */
export const ownJobsSettled = new Counter({
  name: 'adapter_jobs_settled_after_lost_end_total',
  help: 'Jobs of a live worker pool left locked because their completion or failure could not be written (database unavailable), then completed or released by that pool',
  labelNames: ['outcome'] as const,
  registers: [metricsRegistry],
});

/**
 * Jobs replaced (same job key added again) while one of our runs held them, whose run then
 * failed or whose end was lost: dropped instead of left as a job that used up its attempts.
 */
export const supersededJobsDropped = new Counter({
  name: 'adapter_jobs_superseded_dropped_total',
  help: 'Jobs replaced by a newer job with the same key while they ran, whose failed run was dropped instead of being left as permanently failed',
  labelNames: ['when'] as const,
  registers: [metricsRegistry],
});
