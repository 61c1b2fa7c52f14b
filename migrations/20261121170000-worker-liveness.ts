import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Liveness of the processes that hold things, so that a killed process's holdings are freed
 * within seconds instead of hours.
 *
 * job_worker_heartbeats: one row per graphile-worker pool (`locked_by` of the jobs it runs),
 * written before the pool takes its first job and renewed every few seconds. A pool whose
 * heartbeat is older than JOB_WORKER_DEAD_AFTER_SECONDS is dead: its row is deleted and its
 * jobs unlocked with graphile_worker.force_unlock_workers (src/jobs/job-queue.ts).
 *
 * poll_schedule.running_owner: who holds the poll cycle's running lease, so that the lease can
 * be short and renewed while the cycle runs (only by its holder), and released only by it.
 */
export class WorkerLiveness20261121170000 implements MigrationInterface {
  name = 'WorkerLiveness20261121170000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE job_worker_heartbeats (
        worker_id text PRIMARY KEY,
        process text NOT NULL,
        started_at timestamptz NOT NULL DEFAULT now(),
        heartbeat_at timestamptz NOT NULL DEFAULT now()
      )`);
    await q.query(`ALTER TABLE poll_schedule ADD COLUMN running_owner text`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE poll_schedule DROP COLUMN running_owner`);
    await q.query(`DROP TABLE job_worker_heartbeats`);
  }
}
