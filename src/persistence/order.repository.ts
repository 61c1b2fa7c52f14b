import type { EntityManager } from 'typeorm';
import type { Identifier, OrderRequest } from '../domain/order-request';
import type { QcBypassDecision } from '../domain/qc-bypass';
import { RepositoryBase } from './repository-base';
import { pgJson, pgText } from '../common/pg-safe';

/** One `orders` row as the lifecycle reads it. */
export interface OrderRow {
  id: string;
  source: string;
  sender: string | null;
  state: string;
  upstream_order_id: string | null;
  upstream_status: string | null;
  upstream_batch_id: string | null;
  accession_number: string | null;
  patient_id: string | null;
  placer_group_number: string | null;
  study_instance_uid: string | null;
  request: OrderRequest;
  cancel_requested_at: Date | null;
  cancel_reason: string | null;
  /** The order that replaced this one (FHIR `replaces`), set with the cancel it requested. */
  replaced_by: string | null;
  /**
   * Identifiers of the order's patient that an ADT^A40 merge retired (MRG-1), in the order they
   * were retired: what was sent before the merge still names them (a report written from the
   * create's metadata).
   */
  retired_patient_identifiers: Identifier[];
  place_attempted_at: Date | null;
  study_deadline_at: Date | null;
  package_path: string | null;
  upload_completed_at: Date | null;
  lease_owner: string | null;
  lease_until: Date | null;
  qc_bypass: QcBypassDecision | null;
  documents_fetched_for: string | null;
  /** The alert an operator should see (null: none). */
  alert: string | null;
  last_error: string | null;
}

/** Columns a transition may set besides the state (our code only: never user input as a name). */
export type OrderColumns = Partial<{
  upstream_order_id: string;
  upstream_status: string;
  upstream_status_at: Date | 'now';
  upstream_batch_id: string;
  placed_at: 'now';
  study_deadline_at: Date;
  package_path: string | null;
  study_instance_uid: string;
  upload_started_at: 'now';
  upload_completed_at: 'now';
  lease_owner: string | null;
  lease_until: Date | null;
  last_error: string | null;
  alert: string | null;
}>;

/** An order as the intake reads it (the orders a message refers to). */
export interface IntakeOrderRow {
  id: string;
  state: string;
  upstream_order_id: string | null;
  /** Set when a place job read the order's products to create the upstream order. */
  place_attempted_at: Date | null;
  /** Set when the orderer asked to cancel (HL7 CA/DC/OC, FHIR revoke): the order is ending. */
  cancel_requested_at: Date | null;
  request: OrderRequest;
  /** Record numbers an ADT^A40 merged into the order's patient (none for an order being made). */
  retired_patient_identifiers?: Identifier[];
}

/**
 * The `orders` table for the order use cases. Every method runs on `manager` when given (inside
 * the caller's transaction), else on its own connection from the pool.
 */
export class OrderRepository extends RepositoryBase {
  async findById(
    orderId: string,
    lock = false,
    manager?: EntityManager,
  ): Promise<OrderRow | undefined> {
    const rows: OrderRow[] = await this.db(manager).query(
      `SELECT * FROM orders WHERE id = $1${lock ? ' FOR UPDATE' : ''}`,
      [orderId],
    );
    return rows[0];
  }

  /**
   * Moves the order to state `to` (setting `columns` too) only if its state is still `from`:
   * the number of rows changed (0 or 1).
   */
  async updateStateIf(
    orderId: string,
    from: string,
    to: string,
    columns: OrderColumns,
    manager?: EntityManager,
  ): Promise<number> {
    const sets = ['state = $3', 'updated_at = now()', 'version = version + 1'];
    const values: unknown[] = [orderId, from, to];
    for (const [column, value] of Object.entries(columns)) {
      if (value === 'now') {
        sets.push(`${column} = now()`);
      } else {
        values.push(value instanceof Date ? value.toISOString() : value);
        sets.push(`${column} = $${values.length}`);
      }
    }
    const [, count] = (await this.db(manager).query(
      `UPDATE orders SET ${sets.join(', ')} WHERE id = $1 AND state = $2`,
      values,
    )) as [unknown, number];
    return count;
  }

  /**
   * Orders the poller follows: placed upstream, and in `states` — or ended `cancelled` here
   * with alert upstream-cancel-unconfirmed (the upstream never took the cancel and may still
   * run the order: a result it delivers is kept, alert result-after-cancel, and an end it
   * reaches clears the alert).
   */
  async followed(
    states: readonly string[],
    manager?: EntityManager,
  ): Promise<Array<{ id: string; upstream_order_id: string; upstream_status: string }>> {
    return this.db(manager).query(
      `SELECT id, upstream_order_id, upstream_status FROM orders
          WHERE (state = ANY($1::text[])
                 OR (state = 'cancelled' AND alert = 'upstream-cancel-unconfirmed'))
            AND upstream_order_id IS NOT NULL`,
      [states],
    );
  }

  /** An order's PHI-free status for our REST API (with its stored documents). */
  async statusView(
    orderId: string,
    manager?: EntityManager,
  ): Promise<Record<string, unknown> | undefined> {
    const rows: Array<Record<string, unknown>> = await this.db(manager).query(
      `SELECT o.id, o.state, o.source, o.upstream_order_id, o.upstream_status, o.upstream_batch_id,
              o.request->'products' AS products, o.cancel_requested_at, o.qc_bypass, o.alert,
              o.last_error, o.created_at, o.updated_at,
              coalesce((SELECT array_agg(d.kind || '/' || d.report_type ORDER BY d.id)
                          FROM order_documents d WHERE d.order_id = o.id), '{}') AS documents
         FROM orders o WHERE o.id = $1`,
      [orderId],
    );
    return rows[0];
  }

  // ---- intake ----

  /**
   * The orders of `sender` with these placer numbers, locked (intake_lock_and_find: advisory
   * locks per placer number, then the rows).
   */
  async lockAndFindByPlacers(
    sender: string | null,
    placers: string[],
    manager: EntityManager,
  ): Promise<Array<IntakeOrderRow & { placer_order_number: string }>> {
    const rows: Array<
      Omit<IntakeOrderRow, 'cancel_requested_at' | 'retired_patient_identifiers'> & {
        placer_order_number: string;
      }
    > = await manager.query(`SELECT * FROM intake_lock_and_find($1, $2::text[])`, [
      sender,
      placers,
    ]);
    if (rows.length === 0) return [];
    // intake_lock_and_find (a migration's function) does not answer them; the rows are locked.
    const more: Array<{
      id: string;
      cancel_requested_at: Date | null;
      retired_patient_identifiers: Identifier[];
    }> = await manager.query(
      `SELECT id, cancel_requested_at, retired_patient_identifiers FROM orders WHERE id = ANY($1::uuid[])`,
      [rows.map((r) => r.id)],
    );
    const of = new Map(more.map((r) => [r.id, r]));
    return rows.map((r) => ({
      ...r,
      cancel_requested_at: of.get(r.id)?.cancel_requested_at ?? null,
      retired_patient_identifiers: of.get(r.id)?.retired_patient_identifiers ?? [],
    }));
  }

  /**
   * Transaction-scoped advisory locks on the filler numbers of `sender`'s orders that come
   * without a placer number (taken after the placer locks, in sorted order, so two resends of
   * one such order are decided one after the other).
   */
  async lockFillerNumbers(
    sender: string | null,
    fillers: string[],
    manager: EntityManager,
  ): Promise<void> {
    await manager.query(
      `SELECT pg_advisory_xact_lock(hashtextextended(coalesce($1::text, '') || '|filler|' || f, 7470301))
         FROM (SELECT DISTINCT unnest($2::text[]) AS f ORDER BY 1) ordered`,
      [sender, fillers],
    );
  }

  /**
   * The newest order this sender gave that filler order number, or the order with that id (our
   * id, which we send as the filler number when the order came without one), locked. A filler
   * number is scoped to its sender, as a placer number is: two RIS number their orders
   * independently, and an unscoped `ORC|CA||12345` from one cancelled the other's order 12345,
   * another patient's.
   */
  async findByFillerForUpdate(
    filler: string,
    sender: string | null,
    manager: EntityManager,
  ): Promise<Array<IntakeOrderRow & { filler_order_number: string | null }>> {
    // The newest few: the number's namespace (ORC-3.2) picks among them (intake-planner).
    return manager.query(
      `SELECT id, state, upstream_order_id, place_attempted_at, cancel_requested_at, request, filler_order_number,
              retired_patient_identifiers
         FROM orders
        WHERE (filler_order_number = $1 AND sender IS NOT DISTINCT FROM $2) OR id::text = $1
        ORDER BY created_at DESC LIMIT 20 FOR UPDATE`,
      [filler, sender],
    );
  }

  /**
   * The orders a new request names as replaced (FHIR `replaces`), by id, locked: whoever's they
   * are (the intake decides; another sender's is named on the analyst's timeline, never changed).
   */
  async lockForReplace(
    orderIds: string[],
    manager: EntityManager,
  ): Promise<Array<IntakeOrderRow & { sender: string | null }>> {
    if (orderIds.length === 0) return [];
    return manager.query(
      `SELECT id, state, upstream_order_id, place_attempted_at, cancel_requested_at, request, sender
         FROM orders WHERE id::text = ANY($1::text[]) ORDER BY id FOR UPDATE`,
      [orderIds],
    );
  }

  /** Orders not yet ended of the patients with these identifiers, locked. */
  async openOrdersOfPatientsForUpdate(
    patientIds: string[],
    manager: EntityManager,
  ): Promise<IntakeOrderRow[]> {
    return manager.query(
      `SELECT id, state, upstream_order_id, place_attempted_at, cancel_requested_at, request FROM orders
        WHERE patient_id = ANY($1::text[]) AND state NOT IN ('delivered', 'failed', 'cancelled')
        FOR UPDATE`,
      [patientIds],
    );
  }

  /** A cancel by message (HL7 CA, FHIR revoke): only the first request counts. */
  async requestCancelOnce(orderId: string, reason: string, manager?: EntityManager) {
    await this.db(manager).query(
      `UPDATE orders SET cancel_requested_at = now(), cancel_reason = $2, updated_at = now(), version = version + 1
            WHERE id = $1 AND cancel_requested_at IS NULL`,
      [orderId, reason],
    );
  }

  /**
   * The cancel a replacing order requests (FHIR `replaces`), only when none was requested
   * yet, recording which order replaced it (what the clinic reads of it says so).
   */
  async requestCancelAsReplaced(
    orderId: string,
    replacedBy: string,
    reason: string,
    manager?: EntityManager,
  ) {
    await this.db(manager).query(
      `UPDATE orders SET cancel_requested_at = now(), cancel_reason = $2, replaced_by = $3,
              updated_at = now(), version = version + 1
            WHERE id = $1 AND cancel_requested_at IS NULL`,
      [orderId, reason, replacedBy],
    );
  }

  /** The order's changed request and the columns derived from it. */
  async updateRequest(
    orderId: string,
    request: OrderRequest,
    columns: {
      accessionNumber: string | null;
      studyInstanceUid: string | null;
      patientId: string | null;
    },
    manager?: EntityManager,
  ): Promise<void> {
    await this.db(manager).query(
      `UPDATE orders SET request = $2::jsonb, accession_number = $3, study_instance_uid = $4, patient_id = $5,
                  updated_at = now(), version = version + 1 WHERE id = $1`,
      [
        orderId,
        pgJson(request),
        columns.accessionNumber,
        columns.studyInstanceUid,
        columns.patientId,
      ],
    );
  }

  /**
   * The order's request with changed demographics (ADT A08/A40/A47); `retired`: the identifiers
   * a merge took from it, added to those it retired before (each once: merges back and forth
   * between two records do not grow the list).
   */
  async updatePatient(
    orderId: string,
    request: OrderRequest,
    patientId: string | null,
    manager?: EntityManager,
    retired: readonly Identifier[] = [],
  ): Promise<void> {
    await this.db(manager).query(
      `UPDATE orders SET request = $2::jsonb, patient_id = $3,
              retired_patient_identifiers = retired_patient_identifiers || coalesce(
                (SELECT jsonb_agg(e) FROM jsonb_array_elements($4::jsonb) e
                  WHERE NOT retired_patient_identifiers @> jsonb_build_array(e)), '[]'::jsonb),
              updated_at = now(), version = version + 1 WHERE id = $1`,
      [orderId, pgJson(request), patientId, pgJson(retired)],
    );
  }

  /** The first attempt to place the order upstream (a retry looks for its order first). */
  /**
   * Marks the first place attempt and answers the order's request as it stands then: the one
   * statement, under the row lock, so a change of products either comes before it (and is
   * what is placed) or after it (and is refused by the intake, which sees the mark).
   */
  async markPlaceAttempted(
    orderId: string,
    manager?: EntityManager,
  ): Promise<OrderRequest | undefined> {
    const rows: Array<{ request: OrderRequest }> = await this.db(manager).query(
      // as a CTE: TypeORM answers a bare UPDATE … RETURNING with [rows, count]
      `WITH u AS (UPDATE orders SET place_attempted_at = now() WHERE id = $1 RETURNING request)
         SELECT request FROM u`,
      [orderId],
    );
    return rows[0]?.request;
  }

  /** Of `ids`, the upstream order ids other orders than `orderId` already hold. */
  async upstreamOrderIdsHeldElsewhere(
    ids: string[],
    orderId: string,
    manager?: EntityManager,
  ): Promise<string[]> {
    const rows: Array<{ upstream_order_id: string }> = await this.db(manager).query(
      `SELECT upstream_order_id FROM orders WHERE upstream_order_id = ANY($1::text[]) AND id <> $2`,
      [ids, orderId],
    );
    return rows.map((r) => r.upstream_order_id);
  }

  async setLastError(orderId: string, reason: string, manager?: EntityManager): Promise<void> {
    await this.db(manager).query(`UPDATE orders SET last_error = $2 WHERE id = $1`, [
      orderId,
      pgText(reason), // an upstream's words may hold a NUL, which text cannot
    ]);
  }

  async setPackagePath(orderId: string, packagePath: string, manager?: EntityManager) {
    await this.db(manager).query(`UPDATE orders SET package_path = $2 WHERE id = $1`, [
      orderId,
      packagePath,
    ]);
  }

  /** Remembers an upstream status without a state change. */
  async recordUpstreamStatus(
    orderId: string,
    status: string,
    manager?: EntityManager,
  ): Promise<void> {
    await this.db(manager).query(
      `UPDATE orders SET upstream_status = $2, upstream_status_at = now() WHERE id = $1`,
      [orderId, status],
    );
  }

  /** The order's Study Instance UIDs: its own, and the acquired study's (they may differ or be missing). */
  async studyUidsOf(orderId: string, manager?: EntityManager): Promise<string[]> {
    const rows: Array<{ own: string | null; acquired: string | null }> = await this.db(
      manager,
    ).query(
      `SELECT o.study_instance_uid AS own, a.study->>'studyInstanceUid' AS acquired
         FROM orders o LEFT JOIN study_acquisitions a ON a.order_id = o.id
        WHERE o.id = $1`,
      [orderId],
    );
    const row = rows[0];
    return [row?.own, row?.acquired].filter((u): u is string => typeof u === 'string' && u !== '');
  }

  /**
   * Marks the documents of mapping row `storedAs` fetched, unless the mark already names one of
   * `keep` (checked on the row as locked by the update, so a job committing meanwhile counts).
   */
  async setDocumentsFetchedFor(
    orderId: string,
    storedAs: string,
    manager?: EntityManager,
    keep: readonly string[] = [],
  ): Promise<void> {
    await this.db(manager).query(
      `UPDATE orders SET documents_fetched_for = $2
        WHERE id = $1 AND (documents_fetched_for IS NULL OR documents_fetched_for <> ALL($3::text[]))`,
      [orderId, storedAs, keep],
    );
  }

  /** The members of an upstream batch, oldest first. */
  async idsOfBatch(batchId: string, manager?: EntityManager): Promise<Array<{ id: string }>> {
    return this.db(manager).query(
      `SELECT id FROM orders WHERE upstream_batch_id = $1 ORDER BY created_at`,
      [batchId],
    );
  }

  /** Our REST API's cancel request (kept from the first request; the reason is the latest). */
  async requestCancel(orderId: string, reason: string, manager?: EntityManager): Promise<void> {
    await this.db(manager).query(
      `UPDATE orders SET cancel_requested_at = coalesce(cancel_requested_at, now()), cancel_reason = $2,
                updated_at = now(), version = version + 1 WHERE id = $1`,
      [orderId, reason],
    );
  }

  async setQcBypass(
    orderId: string,
    value: QcBypassDecision,
    manager?: EntityManager,
  ): Promise<void> {
    await this.db(manager).query(
      `UPDATE orders SET qc_bypass = $2::jsonb, updated_at = now(), version = version + 1 WHERE id = $1`,
      [orderId, pgJson(value)],
    );
  }

  /** Orders waiting for a study whose deadline has passed (500 at a time). */
  async pastStudyDeadline(manager?: EntityManager): Promise<Array<{ id: string }>> {
    return this.db(manager).query(
      `SELECT id FROM orders WHERE state IN ('placed', 'study-ready') AND study_deadline_at < now() LIMIT 500`,
    );
  }

  /**
   * Orders still `received` whose place job (key `place:<id>`) used every attempt and will
   * not run again (500 at a time). An order whose place job still retries, or was put back
   * for budget, has a job with attempts left and is not listed.
   */
  async placeJobsExhausted(manager?: EntityManager): Promise<
    Array<{
      id: string;
      attempts: number;
      last_error: string | null;
      place_attempted_at: Date | null;
    }>
  > {
    return this.db(manager).query(
      `SELECT o.id, j.attempts, j.last_error, o.place_attempted_at
         FROM orders o
         JOIN graphile_worker._private_jobs j ON j.key = 'place:' || o.id::text
        WHERE o.state = 'received' AND j.attempts >= j.max_attempts AND j.locked_by IS NULL
        LIMIT 500`,
    );
  }

  /**
   * Orders not ended whose orderer asked for the cancel, placed upstream, and whose cancel job
   * (key `cancel:<id>`) used every attempt and will not run again (500 at a time): the
   * upstream never took the cancel, and nothing would end the order here.
   */
  async cancelJobsExhausted(manager?: EntityManager): Promise<
    Array<{
      id: string;
      attempts: number;
      last_error: string | null;
      cancel_requested_at: Date;
    }>
  > {
    return this.db(manager).query(
      `SELECT o.id, j.attempts, j.last_error, o.cancel_requested_at
         FROM orders o
         JOIN graphile_worker._private_jobs j ON j.key = 'cancel:' || o.id::text
        WHERE o.state NOT IN ('delivered', 'failed', 'cancelled')
          AND o.cancel_requested_at IS NOT NULL AND o.upstream_order_id IS NOT NULL
          AND j.attempts >= j.max_attempts AND j.locked_by IS NULL
        LIMIT 500`,
    );
  }

  /**
   * Orders waiting to upload (`study-ready`, `uploading`) whose upload job (key `upload:<id>`)
   * used every attempt and will not run again (500 at a time): the upstream refused the study
   * (5xx, network, 429) for the whole retry budget, and nothing would upload or end the order.
   */
  async uploadJobsExhausted(manager?: EntityManager): Promise<
    Array<{
      id: string;
      attempts: number;
      last_error: string | null;
      upload_started_at: Date | null;
      upstream_order_id: string | null;
    }>
  > {
    return this.db(manager).query(
      `SELECT o.id, j.attempts, j.last_error, o.upload_started_at, o.upstream_order_id
         FROM orders o
         JOIN graphile_worker._private_jobs j ON j.key = 'upload:' || o.id::text
        WHERE o.state IN ('study-ready', 'uploading')
          AND j.attempts >= j.max_attempts AND j.locked_by IS NULL
        LIMIT 500`,
    );
  }

  /**
   * Orders created more than `olderThanMs` ago that wait for a job of theirs and have none
   * (500 at a time): `received` without `place:<id>`; `placed` / `study-ready` (no cancel
   * asked for: the cancel job owns those) without `acquire:<id>` or `upload:<id>`. None in
   * graphile-worker's queue (running, waiting, or failed for good) and none in our job outbox
   * on its way there: the row was lost (deleted by hand, a queue reset, a restore), and
   * nothing would ever run the order again.
   */
  async waitingWithoutJob(
    olderThanMs: number,
    manager?: EntityManager,
  ): Promise<Array<{ id: string; state: string; place_attempted_at: Date | null }>> {
    return this.db(manager).query(
      `SELECT o.id, o.state, o.place_attempted_at
         FROM orders o
        WHERE (o.state = 'received'
               OR (o.state IN ('placed', 'study-ready') AND o.cancel_requested_at IS NULL))
          AND o.created_at < now() - make_interval(secs => $1::float8 / 1000)
          AND NOT EXISTS (
                SELECT 1 FROM graphile_worker._private_jobs j
                 WHERE j.key = ANY(CASE WHEN o.state = 'received' THEN ARRAY['place:' || o.id::text]
                                        ELSE ARRAY['acquire:' || o.id::text, 'upload:' || o.id::text] END))
          AND NOT EXISTS (
                SELECT 1 FROM job_outbox x
                 WHERE x.job_key = ANY(CASE WHEN o.state = 'received' THEN ARRAY['place:' || o.id::text]
                                            ELSE ARRAY['acquire:' || o.id::text, 'upload:' || o.id::text] END))
        ORDER BY o.created_at
        LIMIT 500`,
      [olderThanMs],
    );
  }

  /**
   * Whether a job under one of `keys` is in the queue (in any state, running included) or in
   * the job outbox: the sweep's second look, under the order's row lock, before it enqueues a
   * lost job again (waitingWithoutJob, deliveredWithoutDocumentsJob).
   */
  async hasJobUnder(keys: readonly string[], manager?: EntityManager): Promise<boolean> {
    const rows: Array<{ found: boolean }> = await this.db(manager).query(
      `SELECT EXISTS (SELECT 1 FROM graphile_worker._private_jobs WHERE key = ANY($1::text[]))
           OR EXISTS (SELECT 1 FROM job_outbox WHERE job_key = ANY($1::text[])) AS found`,
      [keys],
    );
    return rows[0]?.found === true;
  }

  /**
   * Orders whose DELIVERED was applied more than `olderThanMs` ago (delivered, or cancelled
   * with alert result-after-cancel) and whose results were never fetched, with no documents
   * job for them (`documents:<id>:DELIVERED` neither in the queue, failed for good included,
   * nor in the job outbox): the job row was lost, and the result would never be published
   * (500 at a time).
   */
  async deliveredWithoutDocumentsJob(
    olderThanMs: number,
    manager?: EntityManager,
  ): Promise<Array<{ id: string }>> {
    return this.db(manager).query(
      `SELECT o.id FROM orders o
        WHERE o.upstream_status = 'DELIVERED'
          AND (o.state = 'delivered' OR (o.state = 'cancelled' AND o.alert = 'result-after-cancel'))
          AND o.documents_fetched_for IS DISTINCT FROM 'DELIVERED'
          AND o.upstream_status_at < now() - make_interval(secs => $1::float8 / 1000)
          AND NOT EXISTS (SELECT 1 FROM graphile_worker._private_jobs j
                           WHERE j.key = 'documents:' || o.id::text || ':DELIVERED')
          AND NOT EXISTS (SELECT 1 FROM job_outbox x
                           WHERE x.job_key = 'documents:' || o.id::text || ':DELIVERED')
        LIMIT 500`,
      [olderThanMs],
    );
  }

  /**
   * Documents jobs (key `documents:<order id>:<mapping row>`) that used every attempt and will
   * not run again, of orders not yet alerted (500 at a time): the reports of a status were
   * never stored, so what waits for them (the result ORU, DiagnosticReport, SR) never goes.
   */
  async documentJobsExhausted(
    manager?: EntityManager,
  ): Promise<Array<{ id: string; row_key: string; attempts: number; last_error: string | null }>> {
    return this.db(manager).query(
      `SELECT o.id, split_part(j.key, ':', 3) AS row_key, j.attempts, j.last_error
         FROM graphile_worker._private_jobs j
         JOIN orders o ON o.id::text = split_part(j.key, ':', 2)
        WHERE j.key LIKE 'documents:%' AND j.attempts >= j.max_attempts AND j.locked_by IS NULL
          AND o.alert IS NULL
        LIMIT 500`,
    );
  }

  /**
   * Whether another documents job of the order used every attempt and will not run again
   * (the one running now, locked, is not counted).
   */
  async hasExhaustedDocumentJob(orderId: string, manager?: EntityManager): Promise<boolean> {
    const rows: unknown[] = await this.db(manager).query(
      `SELECT 1 FROM graphile_worker._private_jobs j
        WHERE j.key LIKE 'documents:' || $1::text || ':%'
          AND j.attempts >= j.max_attempts AND j.locked_by IS NULL
        LIMIT 1`,
      [orderId],
    );
    return rows.length > 0;
  }

  /** Clears the order's alert if it is still `alert`: true when cleared. */
  async clearAlert(orderId: string, alert: string, manager?: EntityManager): Promise<boolean> {
    const rows: unknown[] = await this.db(manager).query(
      `UPDATE orders SET alert = NULL, last_error = NULL, updated_at = now()
        WHERE id = $1 AND alert = $2 RETURNING id`,
      [orderId, alert],
    );
    return rows.length > 0;
  }

  /** Sets an alert on an order that has none (an ended order included): true when set. */
  async raiseAlert(
    orderId: string,
    alert: string,
    reason: string,
    manager?: EntityManager,
  ): Promise<boolean> {
    const rows: unknown[] = await this.db(manager).query(
      `UPDATE orders SET alert = $2, last_error = $3, updated_at = now()
        WHERE id = $1 AND alert IS NULL RETURNING id`,
      [orderId, alert, pgText(reason)],
    );
    return rows.length > 0;
  }

  /**
   * Orders ended `cancelled` here with alert upstream-cancel-unconfirmed (still followed) with
   * no change for longer than `stuckMs`: neither an upstream status (`upstream_status_at`) nor
   * one of ours (`updated_at`: the local end, an alert) — 500 at a time.
   */
  async unconfirmedCancelsStale(
    stuckMs: number,
    manager?: EntityManager,
  ): Promise<Array<{ id: string; upstream_status: string | null }>> {
    return this.db(manager).query(
      `SELECT id, upstream_status FROM orders
        WHERE state = 'cancelled' AND alert = 'upstream-cancel-unconfirmed'
          AND greatest(upstream_status_at, updated_at) < now() - $1 * interval '1 millisecond'
        LIMIT 500`,
      [stuckMs],
    );
  }

  /** Replaces the order's alert `from` by `to` (with its reason): true when it held `from`. */
  async replaceAlert(
    orderId: string,
    from: string,
    to: string,
    reason: string,
    manager?: EntityManager,
  ): Promise<boolean> {
    const rows: unknown[] = await this.db(manager).query(
      `UPDATE orders SET alert = $3, last_error = $4, updated_at = now()
        WHERE id = $1 AND alert = $2 RETURNING id`,
      [orderId, from, to, pgText(reason)],
    );
    return rows.length > 0;
  }

  /** Orders whose upstream status has not changed for longer than `stuckMs` (500 at a time). */
  async stuckUpstream(
    stuckMs: number,
    manager?: EntityManager,
  ): Promise<Array<{ id: string; upstream_status: string }>> {
    return this.db(manager).query(
      `SELECT id, upstream_status FROM orders WHERE state IN ('processing', 'qc-hold')
          AND upstream_status_at < now() - $1 * interval '1 millisecond' LIMIT 500`,
      [stuckMs],
    );
  }
}
