import type { EntityManager } from 'typeorm';
import { RepositoryBase } from './repository-base';
import type { PatientInfo } from '../domain/order-request';

/** How intake_accept_batch answers one message (see migration 20261121160000). */
export type AcceptBatchAnswer = 'accepted' | 'duplicate' | 'known-placer';

/** What every stored message carries: where it came from, its bytes and the answer it got. */
export interface StoredMessageInsert {
  transport: string;
  sender: string | null;
  remoteAddress: string | null;
  messageType: string | null;
  messageControlId: string | null;
  contentType: string;
  raw: Buffer;
  responseCode: string;
  response: Buffer;
  responseContentType: string;
  /** JSON text. */
  quirks: string;
  /** A FHIR create's If-None-Exist header (kept with a refusal, for its reprocess). */
  ifNoneExist?: string;
}

/**
 * An accepted message with everything it creates, as one statement (or intake_accept_batch)
 * writes it. `orders`, `audit` and `jobs` are JSON text (as the general path builds them).
 */
export interface AcceptedMessageInsert extends StoredMessageInsert {
  id: string;
  idempotencyKey: string;
  orders: string;
  mappingVersion: string;
  audit: string;
  jobs: string;
}

/** The accepted message found for an idempotency key, with its answer. */
export interface AcceptedMessageAnswer {
  id: string;
  /** The bytes the original came as (a resend is compared with them). */
  raw: Buffer;
  response: Buffer | null;
  response_code: string | null;
  response_content_type: string | null;
}

/**
 * $1–$7 of every INSERT INTO inbound_messages below: transport, sender, remote_address,
 * message_type, message_control_id, content_type, raw (in that column order).
 */
function envelope(m: StoredMessageInsert): unknown[] {
  return [
    m.transport,
    m.sender,
    m.remoteAddress,
    m.messageType,
    m.messageControlId,
    m.contentType,
    m.raw,
  ];
}

/** `inbound_messages`: every message received, with the answer it was given. */
export class InboundMessageRepository extends RepositoryBase {
  /**
   * One statement: the message (with its answer), the new orders, their audit events and
   * jobs. Nothing is written when the idempotency key was already accepted: then undefined.
   */
  async insertAccepted(
    m: AcceptedMessageInsert,
    manager?: EntityManager,
  ): Promise<string | undefined> {
    const inserted: Array<{ id: string }> = await this.db(manager).query(INSERT_ALL_SQL, [
      ...envelope(m),
      m.idempotencyKey,
      m.quirks,
      m.response,
      m.responseCode,
      m.responseContentType,
      m.orders,
      m.mappingVersion,
      m.audit,
      m.jobs,
      m.id,
    ]);
    return inserted[0]?.id;
  }

  /**
   * Messages of new orders, stored by one call of intake_accept_batch: one answer each. The
   * hot path's statement is a named prepared statement straight on the driver's pool
   * (PostgreSQL parses and plans it once per connection, not per call, and TypeORM's query
   * runner is skipped); on anything but a DataSource it is an ordinary query.
   */
  async acceptBatch(batchJson: string): Promise<AcceptBatchAnswer[]> {
    const text = 'SELECT intake_accept_batch($1::jsonb) AS answers';
    const pool = driverPool(this.db());
    const rows: Array<{ answers: AcceptBatchAnswer[] }> = pool
      ? (await pool.query({ name: 'intake_accept_batch', text, values: [batchJson] })).rows
      : await this.db().query(text, [batchJson]);
    return rows[0]?.answers ?? [];
  }

  /** A refused message (`error` is JSON text): its id. */
  async insertRejected(
    m: StoredMessageInsert & { error: string },
    manager?: EntityManager,
  ): Promise<string> {
    const rows: Array<{ id: string }> = await this.db(manager).query(
      `INSERT INTO inbound_messages
           (transport, sender, remote_address, message_type, message_control_id, content_type, raw,
            outcome, response_code, response, response_content_type, error, quirks, if_none_exist)
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'rejected', $8, $9, $10, $11::jsonb, $12::jsonb, $13)
         RETURNING id`,
      [
        ...envelope(m),
        m.responseCode,
        m.response,
        m.responseContentType,
        m.error,
        m.quirks,
        m.ifNoneExist ?? null,
      ],
    );
    return rows[0]!.id;
  }

  /** The accepted message with this idempotency key, with its answer. */
  async findAccepted(
    idempotencyKey: string,
    manager?: EntityManager,
  ): Promise<AcceptedMessageAnswer | undefined> {
    const original: AcceptedMessageAnswer[] = await this.db(manager).query(
      `SELECT id, raw, response, response_code, response_content_type FROM inbound_messages
            WHERE idempotency_key = $1 AND outcome = 'accepted'`,
      [idempotencyKey],
    );
    return original[0];
  }

  /**
   * The idempotency key of this sender's accepted ServiceRequest create with these very bytes,
   * if any (the oldest): a plain create that repeats a conditional create, kept under its
   * If-None-Exist search, is its resend. By inbound_messages_fhir_create_content_idx, whose
   * predicate names the one message type it serves.
   */
  async findAcceptedCreateKeyBySameBytes(sender: string, raw: Buffer): Promise<string | undefined> {
    const rows: Array<{ idempotency_key: string }> = await this.db().query(
      `SELECT idempotency_key FROM inbound_messages
        WHERE message_type = 'ServiceRequest create' AND outcome = 'accepted'
          AND sender = $1 AND sha256(raw) = sha256($2::bytea) AND raw = $2::bytea
        ORDER BY received_at LIMIT 1`,
      [sender, raw],
    );
    return rows[0]?.idempotency_key;
  }

  /**
   * The patients of this sender's orders under these placer numbers, as they stand now (an
   * ADT merge may have moved them): a resend under the same key must be about the same
   * patient. By the (placer, sender) index: a lookup by message would scan orders.
   */
  async patientsUnderPlacers(sender: string | null, placers: string[]): Promise<PatientInfo[]> {
    if (placers.length === 0) return [];
    const rows: Array<{ patient: PatientInfo | null }> = await this.db().query(
      `SELECT request->'patient' AS patient FROM orders
        WHERE placer_order_number = ANY ($1::text[]) AND sender IS NOT DISTINCT FROM $2`,
      [placers, sender],
    );
    return rows.flatMap((r) => (r.patient ? [r.patient] : []));
  }

  /** A resend answered with the original's answer: its id. */
  async insertDuplicate(
    m: StoredMessageInsert & { idempotencyKey: string },
    manager?: EntityManager,
  ): Promise<string> {
    const rows: Array<{ id: string }> = await this.db(manager).query(
      `INSERT INTO inbound_messages
           (transport, sender, remote_address, message_type, message_control_id, content_type, raw,
            idempotency_key, outcome, response_code, response, response_content_type, quirks)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'duplicate', $9, $10, $11, $12::jsonb)
         RETURNING id`,
      [
        ...envelope(m),
        m.idempotencyKey,
        m.responseCode,
        m.response,
        m.responseContentType,
        m.quirks,
      ],
    );
    return rows[0]!.id;
  }
}

/** One statement: the message (with its answer), the new orders, their audit events and jobs. */
const INSERT_ALL_SQL = `WITH m AS (
   INSERT INTO inbound_messages
     (id, transport, sender, remote_address, message_type, message_control_id, content_type, raw,
      idempotency_key, outcome, quirks, response, response_code, response_content_type)
   VALUES ($17::uuid, $1, $2, $3, $4, $5, $6, $7, $8, 'accepted', $9::jsonb, $10, $11, $12)
   ON CONFLICT (idempotency_key) WHERE outcome = 'accepted' DO NOTHING
   RETURNING id
 ), o AS (
   INSERT INTO orders
     (id, source, sender, inbound_message_id, state, accession_number, patient_id, placer_order_number,
      filler_order_number, placer_group_number, study_instance_uid, request, mapping_version)
   SELECT (r->>'id')::uuid, r->>'source', $2, m.id, 'received', r->>'accession_number', r->>'patient_id',
          r->>'placer_order_number', r->>'filler_order_number', r->>'placer_group_number',
          r->>'study_instance_uid', r->'request', $14
     FROM m, jsonb_array_elements($13::jsonb) r
   RETURNING id
 ), a AS (
   INSERT INTO audit_events (order_id, inbound_message_id, kind, severity, actor, summary, detail)
   SELECT (e->>'orderId')::uuid, m.id, e->>'kind', coalesce(e->>'severity', 'info'), e->>'actor', e->>'summary',
          coalesce(e->'detail', '{}'::jsonb)
     FROM m, jsonb_array_elements($15::jsonb) e
 ), j AS (
   INSERT INTO job_outbox (task, payload, job_key)
   SELECT x->>'task', x->'payload', x->>'job_key' FROM m, jsonb_array_elements($16::jsonb) x
 )
 SELECT id FROM m`;

interface PgPool {
  query(config: {
    name: string;
    text: string;
    values: unknown[];
  }): Promise<{ rows: Array<{ answers: AcceptBatchAnswer[] }> }>;
}

/** The pg Pool behind a TypeORM DataSource on PostgreSQL, if that is what `connection` is. */
function driverPool(connection: unknown): PgPool | undefined {
  const pool = (connection as { driver?: { master?: Partial<PgPool> } }).driver?.master;
  return typeof pool?.query === 'function' ? (pool as PgPool) : undefined;
}
