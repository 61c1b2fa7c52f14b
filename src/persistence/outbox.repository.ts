import type { EntityManager } from 'typeorm';
import { pgJson, pgText } from '../common/pg-safe';
import { RepositoryBase } from './repository-base';

/**
 * SQL of the outbox (table outbox): the writes of a status change on the caller's
 * transaction, and the claim / lease / record statements of the outbox workers. The payload
 * is the publisher's business (outbound/outbox-order-events.ts): stored as jsonb, typed by
 * the caller.
 */

/** A row claimed by a worker: leased (next_attempt_at pushed forward), attempt counted. */
export interface ClaimedOutboxRow<P = unknown> {
  id: string;
  order_id: string | null;
  destination: string;
  kind: string;
  payload: P;
  attempts: number;
  created_at: Date;
}

/** One outbox row to write; `dedupe_key` makes a resend of the same change a no-op. */
export interface NewOutboxEntry {
  orderId: string;
  destination: string;
  kind: string;
  dedupeKey: string;
  payload: unknown;
}

/** Rows of an order per kind, and how many of them were result publications. */
export interface OutboxKindCount {
  kind: string;
  n: number;
  results: number;
}

/** The claim is still ours: pending, with the attempt count we claimed it at. */
const OURS = `id = $1::bigint AND status = 'pending' AND attempts = $2`;

export class OutboxRepository extends RepositoryBase {
  /** How many rows the order has per kind (a later result publication is a correction). */
  async countByKind(orderId: string, manager?: EntityManager): Promise<OutboxKindCount[]> {
    return this.db(manager).query(
      `SELECT kind, count(*)::int AS n,
              count(*) FILTER (WHERE kind NOT IN ('fhir-task', 'hl7-orm-status')
                                AND payload->'row'->>'report' IN ('final', 'corrected'))::int AS results
         FROM outbox WHERE order_id = $1 GROUP BY kind`,
      [orderId],
    );
  }

  /** Writes rows on the caller's transaction (one multi-row INSERT); known dedupe keys are skipped. */
  async insert(entries: readonly NewOutboxEntry[], manager?: EntityManager): Promise<void> {
    if (entries.length === 0) return;
    const values: unknown[] = [];
    const tuples: string[] = [];
    for (const e of entries) {
      const i = values.length;
      tuples.push(`($${i + 1}::uuid, $${i + 2}, $${i + 3}, $${i + 4}, $${i + 5}::jsonb)`);
      values.push(e.orderId, e.destination, e.kind, e.dedupeKey, pgJson(e.payload));
    }
    await this.db(manager).query(
      `INSERT INTO outbox (order_id, destination, kind, dedupe_key, payload) VALUES ${tuples.join(', ')}
       ON CONFLICT (destination, dedupe_key) DO NOTHING`,
      values,
    );
  }

  /**
   * The alert (`destination`, kind `dead-letter`) of the row this transaction gave up, keyed
   * by the row and that transaction (`dead_xid`): each time a row dies (again after a replay,
   * whose attempts start over) it is alerted once. Keyed by the attempt count, a replayed row
   * dying on the attempt it died on before matched the first alert and was not alerted.
   */
  async insertDeadLetterAlert(
    outboxId: string,
    destination: string,
    payload: unknown,
    manager?: EntityManager,
  ): Promise<void> {
    await this.db(manager).query(
      `INSERT INTO outbox (order_id, destination, kind, dedupe_key, payload)
       SELECT order_id, $2, 'dead-letter', 'dead-letter:' || id || ':' || dead_xid::text, $3::jsonb
         FROM outbox WHERE id = $1::bigint AND status = 'dead' AND dead_xid = pg_current_xact_id()
       ON CONFLICT (destination, dedupe_key) DO NOTHING`,
      [outboxId, destination, pgJson(payload)],
    );
  }

  /**
   * Claims up to `limit` due rows of a destination for `workerId`: per (order, destination)
   * only the lowest pending row, and none while a later row of it is in flight (a replayed
   * dead letter waits for the newer document being delivered, then is superseded or sent
   * after it, never beside it), under FOR UPDATE SKIP LOCKED; pushes their next_attempt_at
   * by `leaseMs` and counts the attempt.
   */
  async claimDue<P>(
    destination: string,
    limit: number,
    leaseMs: number,
    workerId: string,
  ): Promise<ClaimedOutboxRow<P>[]> {
    return (await this.db().query(
      `WITH due AS (
         SELECT o.id FROM outbox o
          WHERE o.destination = $1 AND o.status = 'pending' AND o.next_attempt_at <= now()
            AND NOT EXISTS (
              SELECT 1 FROM outbox e
               WHERE e.destination = o.destination AND e.order_id = o.order_id
                 AND e.status = 'pending' AND e.id < o.id)
            AND NOT EXISTS (
              SELECT 1 FROM outbox l
               WHERE l.destination = o.destination AND l.order_id = o.order_id
                 AND l.status = 'pending' AND l.id > o.id
                 AND l.claimed_by IS NOT NULL AND l.next_attempt_at > now())
          ORDER BY o.id
          LIMIT $2
          FOR UPDATE OF o SKIP LOCKED),
       claimed AS (
         UPDATE outbox SET attempts = outbox.attempts + 1, updated_at = now(),
                next_attempt_at = now() + $3::int * interval '1 millisecond', claimed_by = $4
           FROM due WHERE outbox.id = due.id
         RETURNING outbox.id::text AS id, outbox.order_id, outbox.destination, outbox.kind,
                   outbox.payload, outbox.attempts, outbox.created_at)
       -- As a CTE: TypeORM returns [rows, count] for a bare UPDATE … RETURNING.
       SELECT * FROM claimed ORDER BY id::bigint`,
      [destination, limit, leaseMs, workerId],
    )) as ClaimedOutboxRow<P>[];
  }

  /**
   * Pushes the lease of the given rows still claimed by `workerId` and pending; returns the
   * ids renewed.
   */
  async renewLeases(ids: readonly string[], workerId: string, leaseMs: number): Promise<string[]> {
    const renewed: Array<{ id: string }> = await this.db().query(
      `WITH r AS (
           UPDATE outbox SET next_attempt_at = now() + $3::int * interval '1 millisecond'
            WHERE id = ANY($1::bigint[]) AND claimed_by = $2 AND status = 'pending'
           RETURNING id)
         SELECT id::text FROM r`,
      [ids, workerId, leaseMs],
    );
    return renewed.map((r) => r.id);
  }

  /**
   * Makes due now the pending rows of a destination claimed by `workerId` except `keepIds`
   * (those still being delivered); returns the ids released.
   */
  async releaseClaims(
    destination: string,
    workerId: string,
    keepIds: readonly string[],
  ): Promise<string[]> {
    const released: Array<{ id: string }> = await this.db().query(
      `WITH r AS (
           UPDATE outbox SET next_attempt_at = now(), claimed_by = NULL, updated_at = now()
            WHERE destination = $1 AND status = 'pending' AND claimed_by = $2
              AND NOT (id = ANY($3::bigint[]))
           RETURNING id)
         SELECT id::text FROM r`,
      [destination, workerId, keepIds],
    );
    return released.map((r) => r.id);
  }

  /** The latest row of the same order, destination and kind after `row` already delivered. */
  async deliveredLaterThan(row: {
    id: string;
    orderId: string | null;
    destination: string;
    kind: string;
  }): Promise<string | null> {
    const later: Array<{ id: string }> = await this.db().query(
      `SELECT id::text AS id FROM outbox
        WHERE order_id = $1 AND destination = $2 AND kind = $3 AND id > $4::bigint AND status = 'delivered'
        ORDER BY id DESC LIMIT 1`,
      [row.orderId, row.destination, row.kind, row.id],
    );
    return later[0]?.id ?? null;
  }

  /*
   * The three records of an attempt change a row only while the claim is still ours (pending,
   * attempt count as we claimed it): a record tried again after the database came back, or
   * after our lease lapsed and another replica claimed the row, changes nothing. Each returns
   * whether it changed the row.
   */

  async markDelivered(id: string, attempts: number, manager?: EntityManager): Promise<boolean> {
    const updated: Array<{ id: string }> = await this.db(manager).query(
      `WITH u AS (UPDATE outbox SET status = 'delivered', delivered_at = now(), updated_at = now(), last_error = NULL, claimed_by = NULL
                        WHERE ${OURS} RETURNING id)
           SELECT id::text FROM u`,
      [id, attempts],
    );
    return updated.length > 0;
  }

  async scheduleRetry(
    id: string,
    attempts: number,
    delayMs: number,
    reason: string,
    manager?: EntityManager,
  ): Promise<boolean> {
    const updated: Array<{ id: string }> = await this.db(manager).query(
      `WITH u AS (UPDATE outbox SET next_attempt_at = now() + $3::int * interval '1 millisecond', updated_at = now(), last_error = $4, claimed_by = NULL
                        WHERE ${OURS} RETURNING id)
           SELECT id::text FROM u`,
      [id, attempts, delayMs, pgText(reason)],
    );
    return updated.length > 0;
  }

  /**
   * Gives the row up. `dead_xid` names this transaction, so that a dead-letter page read before
   * it commits shows the row on the next page (late-commit paging, audit-query.paging.ts).
   */
  async markDead(
    id: string,
    attempts: number,
    reason: string,
    manager?: EntityManager,
  ): Promise<boolean> {
    const updated: Array<{ id: string }> = await this.db(manager).query(
      `WITH u AS (UPDATE outbox SET status = 'dead', updated_at = now(), dead_xid = pg_current_xact_id(), last_error = $3, claimed_by = NULL
                        WHERE ${OURS} RETURNING id)
           SELECT id::text FROM u`,
      [id, attempts, pgText(reason)],
    );
    return updated.length > 0;
  }

  /**
   * What the attempt sent and what the peer answered (outbox.last_exchange), on the
   * transaction that records the attempt.
   */
  /**
   * The exchange of the last attempt. A peer's answer may hold what PostgreSQL refuses (a RIS
   * padding MSA-3 with NUL bytes, a lone surrogate in a cut text): stored with each replaced
   * (pgJson), since a record that fails leaves the row to be sent again, and again.
   */
  async recordExchange(
    id: string,
    exchange: Record<string, unknown>,
    manager?: EntityManager,
  ): Promise<void> {
    await this.db(manager).query(
      `WITH u AS (UPDATE outbox SET last_exchange = $2::jsonb WHERE id = $1::bigint RETURNING id)
         SELECT id FROM u`,
      [id, pgJson(exchange)],
    );
  }
}
