import type { EntityManager } from 'typeorm';
import { RepositoryBase } from './repository-base';
import { pgJson } from '../common/pg-safe';

/**
 * `poll_schedule`: one row per schedule (the upstream poll cycle): its due time and the
 * running lease (`running_until`, `running_owner`), on the database's clock.
 */
export class PollScheduleRepository extends RepositoryBase {
  async ensure(name: string, manager?: EntityManager): Promise<void> {
    await this.db(manager).query(
      `INSERT INTO poll_schedule (name) VALUES ($1) ON CONFLICT (name) DO NOTHING`,
      [name],
    );
  }

  /** Takes the running lease if due (or `force`) and not held: true when taken. */
  async claim(
    name: string,
    force: boolean,
    leaseMs: number,
    owner: string,
    manager?: EntityManager,
  ): Promise<boolean> {
    const [rows] = (await this.db(manager).query(
      `UPDATE poll_schedule SET running_until = now() + $3 * interval '1 millisecond',
              running_owner = $4, last_started_at = now()
        WHERE name = $1 AND ($2 OR next_due_at <= now())
          AND (running_until IS NULL OR running_until < now())
        RETURNING name`,
      [name, force, leaseMs, owner],
    )) as [unknown[], number];
    return rows.length === 1;
  }

  /** Extends the lease if `owner` still holds it: false when it does not. */
  async renew(
    name: string,
    owner: string,
    leaseMs: number,
    manager?: EntityManager,
  ): Promise<boolean> {
    const [rows] = (await this.db(manager).query(
      `UPDATE poll_schedule SET running_until = now() + $3 * interval '1 millisecond'
        WHERE name = $1 AND running_owner = $2 RETURNING name`,
      [name, owner, leaseMs],
    )) as [unknown[], number];
    return rows.length > 0;
  }

  /** Releases the lease (only its holder) and sets the next due time. */
  async release(
    name: string,
    owner: string,
    nextMs: number,
    stats: unknown,
    manager?: EntityManager,
  ): Promise<void> {
    await this.db(manager).query(
      `UPDATE poll_schedule SET running_until = NULL, running_owner = NULL, last_finished_at = now(),
                next_due_at = now() + $2 * interval '1 millisecond', last_stats = $3::jsonb
          WHERE name = $1 AND running_owner = $4`,
      [name, nextMs, pgJson(stats), owner],
    );
  }
}
