import type { EntityManager } from 'typeorm';
import { pgJson } from '../common/pg-safe';
import { RepositoryBase } from './repository-base';

/** A group of dead-letter alerts (destination + reason) as its lock found it. */
export interface AlertGroupRow {
  /** The window is open: its first alert went out less than the window ago. */
  open: boolean;
  window_ends_at: Date | null;
  /** The follow-up alert row further dead letters join, while it has not been sent. */
  summary_outbox_id: string | null;
}

/**
 * SQL of dead-letter alert coalescing (table alert_coalescing, and the follow-up alert rows of
 * the outbox): every statement runs on the transaction that gives a row up, which holds the
 * group's row locked from `lockGroup` to its commit, so that two workers' dead letters of one
 * group are taken one after the other.
 */
export class AlertCoalescingRepository extends RepositoryBase {
  async lockGroup(groupKey: string, manager: EntityManager): Promise<AlertGroupRow> {
    const rows: AlertGroupRow[] = await this.db(manager).query(
      `INSERT INTO alert_coalescing (group_key) VALUES ($1)
       ON CONFLICT (group_key) DO UPDATE SET updated_at = now()
       RETURNING coalesce(window_ends_at > clock_timestamp(), false) AS open, window_ends_at,
                 summary_outbox_id::text AS summary_outbox_id`,
      [groupKey],
    );
    return rows[0]!;
  }

  /** Starts the group's window now (its first alert is being sent), with no follow-up yet. */
  async openWindow(groupKey: string, windowMs: number, manager: EntityManager): Promise<void> {
    await this.db(manager).query(
      `UPDATE alert_coalescing
          SET window_ends_at = clock_timestamp() + $2::int * interval '1 millisecond',
              summary_outbox_id = NULL, updated_at = now()
        WHERE group_key = $1`,
      [groupKey, windowMs],
    );
  }

  /**
   * Adds a dead letter to the follow-up row while no worker has taken it (pending, never
   * claimed) and it names fewer than `maxOrderIds` orders: the count goes up by one, the order
   * id joins the list unless already there. Returns whether it did.
   */
  async joinSummary(
    summaryId: string,
    orderId: string,
    maxOrderIds: number,
    manager: EntityManager,
  ): Promise<boolean> {
    const rows: Array<{ id: string }> = await this.db(manager).query(
      `WITH u AS (
         UPDATE outbox SET updated_at = now(), payload = jsonb_set(jsonb_set(jsonb_set(payload,
                '{deadLetters,count}', to_jsonb((payload #>> '{deadLetters,count}')::int + 1)),
                '{deadLetters,lastAt}', to_jsonb(clock_timestamp())),
                '{deadLetters,orderIds}',
                CASE WHEN payload #> '{deadLetters,orderIds}' @> to_jsonb(ARRAY[$2::text])
                     THEN payload #> '{deadLetters,orderIds}'
                     ELSE (payload #> '{deadLetters,orderIds}') || to_jsonb(ARRAY[$2::text]) END)
          WHERE id = $1::bigint AND status = 'pending' AND attempts = 0 AND claimed_by IS NULL
            AND jsonb_array_length(payload #> '{deadLetters,orderIds}') < $3
         RETURNING id)
       SELECT id::text FROM u`,
      [summaryId, orderId, maxOrderIds],
    );
    return rows.length > 0;
  }

  /**
   * A new follow-up alert row of the group, due when its window ends, and the group pointing
   * at it. `deadRowId` (the row this transaction gave up) keys it. Its `created_at` is when it
   * is due: the destination's backlog age (/health) and the delivery time (metrics) count from
   * there, not from a wait that is the point of it.
   */
  async insertSummary(
    groupKey: string,
    destination: string,
    deadRowId: string,
    payload: unknown,
    manager: EntityManager,
  ): Promise<void> {
    await this.db(manager).query(
      `WITH s AS (
         INSERT INTO outbox (destination, kind, dedupe_key, payload, next_attempt_at, created_at)
         SELECT $2, 'dead-letter-summary', 'dead-letter-summary:' || $3 || ':' || pg_current_xact_id()::text,
                $4::jsonb, g.window_ends_at, greatest(now(), g.window_ends_at)
           FROM alert_coalescing g WHERE g.group_key = $1
         RETURNING id)
       UPDATE alert_coalescing SET summary_outbox_id = (SELECT id FROM s), updated_at = now()
        WHERE group_key = $1`,
      [groupKey, destination, deadRowId, pgJson(payload)],
    );
  }
}
