import type { EntityManager } from 'typeorm';
import type { Queryable } from './queryable';
import { TERMINAL_ORDER_STATES } from '../domain/order-state';
import type { InstanceHeader } from '../domain/dicom-instance';
import { pgJson } from '../common/pg-safe';

/** SQL for pushed instances (study_instances) and per-order acquisitions (study_acquisitions). */

export type PushSource = 'stow' | 'c-store';

export interface StoredInstance {
  id: string;
  studyInstanceUid: string;
  seriesInstanceUid: string;
  sopInstanceUid: string;
  sopClassUid: string;
  accessionNumber: string | null;
  source: PushSource;
  orderId: string | null;
  filePath: string;
  sizeBytes: number;
  header: InstanceHeader;
  receivedAt: Date;
  holdUntil: Date | null;
}

interface InstanceRow {
  id: string;
  study_instance_uid: string;
  series_instance_uid: string;
  sop_instance_uid: string;
  sop_class_uid: string;
  accession_number: string | null;
  source: PushSource;
  order_id: string | null;
  file_path: string;
  size_bytes: string;
  header: InstanceHeader;
  received_at: Date;
  hold_until: Date | null;
}

const INSTANCE_COLUMNS = `id, study_instance_uid, series_instance_uid, sop_instance_uid, sop_class_uid,
  accession_number, source, order_id, file_path, size_bytes, header, received_at, hold_until`;

function toInstance(r: InstanceRow): StoredInstance {
  return {
    id: r.id,
    studyInstanceUid: r.study_instance_uid,
    seriesInstanceUid: r.series_instance_uid,
    sopInstanceUid: r.sop_instance_uid,
    sopClassUid: r.sop_class_uid,
    accessionNumber: r.accession_number,
    source: r.source,
    orderId: r.order_id,
    filePath: r.file_path,
    sizeBytes: Number(r.size_bytes),
    header: r.header,
    receivedAt: new Date(r.received_at),
    holdUntil: r.hold_until ? new Date(r.hold_until) : null,
  };
}

const TERMINAL = [...TERMINAL_ORDER_STATES];

/** TypeORM's postgres driver answers UPDATE/DELETE … RETURNING with [rows, affected]. */
function returned<T>(result: unknown): T[] {
  if (
    Array.isArray(result) &&
    result.length === 2 &&
    Array.isArray(result[0]) &&
    typeof result[1] === 'number'
  )
    return result[0] as T[];
  return result as T[];
}

/**
 * The one order a received instance belongs to: by Study Instance UID first; failing that,
 * by accession number when the order names no other study. More than one candidate is
 * ambiguous and matches none (the instance is held until an acquire() claims it).
 */
export async function findOrderForInstance(
  m: EntityManager,
  studyInstanceUid: string,
  accessionNumber: string | undefined,
): Promise<{ orderId: string; by: 'study-uid' | 'accession' } | { ambiguous: true } | undefined> {
  const byUid = (await m.query(
    `SELECT id FROM orders WHERE study_instance_uid = $1 AND state <> ALL($2::text[]) LIMIT 2`,
    [studyInstanceUid, TERMINAL],
  )) as Array<{ id: string }>;
  if (byUid.length === 1) return { orderId: byUid[0]!.id, by: 'study-uid' };
  if (byUid.length > 1) return { ambiguous: true };
  if (!accessionNumber) return undefined;
  const byAccession = (await m.query(
    `SELECT id FROM orders
      WHERE accession_number = $1 AND (study_instance_uid IS NULL OR study_instance_uid = $2)
        AND state <> ALL($3::text[]) LIMIT 2`,
    [accessionNumber, studyInstanceUid, TERMINAL],
  )) as Array<{ id: string }>;
  if (byAccession.length === 1) return { orderId: byAccession[0]!.id, by: 'accession' };
  if (byAccession.length > 1) return { ambiguous: true };
  return undefined;
}

export interface InstanceInput {
  header: InstanceHeader;
  source: PushSource;
  sender: string | null;
  filePath: string;
  sizeBytes: number;
  receivedAt: Date;
  orderId: string | null;
  holdUntil: Date | null;
}

/**
 * Transaction-scoped locks on these SOP Instance UIDs (taken in order, so two requests holding
 * the same instances cannot deadlock): concurrent copies of one instance are recorded in turn.
 */
export async function lockInstances(m: EntityManager, sopInstanceUids: string[]): Promise<void> {
  const uids = [...new Set(sopInstanceUids)].sort();
  if (uids.length === 0) return;
  await m.query(
    `SELECT pg_advisory_xact_lock(hashtextextended('study-instance:' || u, 0))
       FROM (SELECT u FROM unnest($1::text[]) AS u ORDER BY u) AS ordered`,
    [uids],
  );
}

/**
 * The held instances (unmatched, hold not over) of `sender` and of all senders, each counted up
 * to its limit (no more is read). Takes a transaction-scoped lock on the sender first: two
 * requests or associations of one sender recording at once count in turn, and cannot both
 * take the last places. Senders count apart, so the total may pass by what other senders
 * record at the same moment.
 */
export async function countHeldUnmatched(
  m: EntityManager,
  sender: string | null,
  now: Date,
  limits: { perSender: number; total: number },
): Promise<{ sender: number; total: number }> {
  await m.query(`SELECT pg_advisory_xact_lock(hashtextextended('study-held:' || $1, 0))`, [
    sender === null ? '' : `s:${sender}`,
  ]);
  // `sender = $4`, not IS NOT DISTINCT FROM: only the equality reads the sender's index
  // (3 ms, not 30, over 200,000 held rows; a C-STORE data set counts once each).
  const bySender = sender === null ? 'sender IS NULL' : 'sender = $4';
  const rows = (await m.query(
    `SELECT
       (SELECT count(*) FROM (SELECT 1 FROM study_instances
         WHERE order_id IS NULL AND hold_until > $1 AND ${bySender}
         LIMIT $2) s)::int AS sender,
       (SELECT count(*) FROM (SELECT 1 FROM study_instances
         WHERE order_id IS NULL AND hold_until > $1 LIMIT $3) t)::int AS total`,
    [now, limits.perSender, limits.total, ...(sender === null ? [] : [sender])],
  )) as Array<{ sender: number; total: number }>;
  return rows[0]!;
}

/**
 * Whether recording this instance replaces a row rather than adding one (upsertInstance): a
 * resend into the same series, or the same SOP Instance under another Study Instance UID.
 */
export async function instanceHasRow(m: EntityManager, header: InstanceHeader): Promise<boolean> {
  const rows = (await m.query(
    `SELECT 1 FROM study_instances WHERE sop_instance_uid = $1
        AND (study_instance_uid <> $2 OR series_instance_uid = $3) LIMIT 1`,
    [header.sopInstanceUid, header.studyInstanceUid, header.seriesInstanceUid],
  )) as unknown[];
  return rows.length > 0;
}

/**
 * Records a received instance, keyed by study, series and SOP Instance UID: a study may hold
 * one SOP Instance UID in two series, and both are kept, as a pull keeps them. A resend into
 * the same series replaces the earlier copy, and so does the same SOP Instance sent under
 * another Study Instance UID (a study UID corrected at the modality or the RIS); either keeps
 * the order the earlier copy was matched to. `priorPaths`: the files of the copies replaced.
 */
export async function upsertInstance(
  m: EntityManager,
  input: InstanceInput,
): Promise<{ id: string; orderId: string | null; replaced: boolean; priorPaths: string[] }> {
  const h = input.header;
  const corrected = returned<{ file_path: string; order_id: string | null }>(
    await m.query(
      `DELETE FROM study_instances WHERE sop_instance_uid = $1 AND study_instance_uid <> $2
       RETURNING file_path, order_id::text`,
      [h.sopInstanceUid, h.studyInstanceUid],
    ),
  );
  const orderId = corrected.find((r) => r.order_id)?.order_id ?? input.orderId;
  const rows = (await m.query(
    `WITH prior AS (SELECT file_path FROM study_instances
                     WHERE study_instance_uid = $1 AND series_instance_uid = $2
                       AND sop_instance_uid = $3)
     INSERT INTO study_instances (study_instance_uid, series_instance_uid, sop_instance_uid,
        sop_class_uid, transfer_syntax_uid, accession_number, source, sender, order_id, file_path,
        size_bytes, header, received_at, matched_at, hold_until)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb, $13::timestamptz, CASE WHEN $9::uuid IS NULL THEN NULL ELSE $13::timestamptz END, $14::timestamptz)
     ON CONFLICT (study_instance_uid, series_instance_uid, sop_instance_uid) DO UPDATE SET
        sop_class_uid = EXCLUDED.sop_class_uid,
        transfer_syntax_uid = EXCLUDED.transfer_syntax_uid,
        accession_number = EXCLUDED.accession_number,
        source = EXCLUDED.source,
        sender = EXCLUDED.sender,
        file_path = EXCLUDED.file_path,
        size_bytes = EXCLUDED.size_bytes,
        header = EXCLUDED.header,
        received_at = EXCLUDED.received_at,
        order_id = COALESCE(study_instances.order_id, EXCLUDED.order_id),
        matched_at = COALESCE(study_instances.matched_at, EXCLUDED.matched_at),
        hold_until = CASE WHEN COALESCE(study_instances.order_id, EXCLUDED.order_id) IS NULL
                          THEN EXCLUDED.hold_until ELSE NULL END
     RETURNING id, order_id, (xmax <> 0) AS replaced, (SELECT file_path FROM prior) AS prior_path`,
    [
      h.studyInstanceUid,
      h.seriesInstanceUid,
      h.sopInstanceUid,
      h.sopClassUid,
      h.transferSyntaxUid,
      h.accessionNumber ?? null,
      input.source,
      input.sender,
      orderId,
      input.filePath,
      input.sizeBytes,
      pgJson(h),
      input.receivedAt,
      orderId ? null : input.holdUntil,
    ],
  )) as Array<{
    id: string;
    order_id: string | null;
    replaced: boolean;
    prior_path: string | null;
  }>;
  const row = rows[0]!;
  return {
    id: row.id,
    orderId: row.order_id,
    replaced: row.replaced || corrected.length > 0,
    priorPaths: [...corrected.map((r) => r.file_path), ...(row.prior_path ? [row.prior_path] : [])],
  };
}

/**
 * Claims the unmatched (held, not expired) instances of an order's study for that order:
 * by Study Instance UID when the order knows it, else by accession number.
 */
export async function claimInstances(
  m: EntityManager,
  orderId: string,
  key: { studyInstanceUid?: string | null; accessionNumber?: string | null },
  now: Date,
): Promise<Array<{ studyInstanceUid: string; count: number }>> {
  const where = key.studyInstanceUid
    ? 'study_instance_uid = $3'
    : key.accessionNumber
      ? 'accession_number = $3'
      : undefined;
  if (!where) return [];
  const rows = (await m.query(
    `WITH claimed AS (
       UPDATE study_instances SET order_id = $1, matched_at = $2, hold_until = NULL
        WHERE order_id IS NULL AND (hold_until IS NULL OR hold_until > $2) AND ${where}
        RETURNING study_instance_uid)
     SELECT study_instance_uid, count(*)::int AS count FROM claimed GROUP BY study_instance_uid`,
    [orderId, now, key.studyInstanceUid ?? key.accessionNumber],
  )) as Array<{ study_instance_uid: string; count: number }>;
  return rows.map((r) => ({ studyInstanceUid: r.study_instance_uid, count: r.count }));
}

export async function instancesOfOrder(
  m: EntityManager,
  orderId: string,
): Promise<StoredInstance[]> {
  const rows = (await m.query(
    `SELECT ${INSTANCE_COLUMNS} FROM study_instances WHERE order_id = $1
      ORDER BY series_instance_uid, received_at, sop_instance_uid`,
    [orderId],
  )) as InstanceRow[];
  return rows.map(toInstance);
}

/**
 * The distinct identifiers (accession, Patient ID and their issuers) of the instances of
 * `studyInstanceUid` that `orderId` does not hold: held unmatched, or matched to another order
 * (a series that came with another accession or patient). One row per distinct combination,
 * however many instances.
 */
export async function identitiesOfStudyOutsideOrder(
  m: EntityManager,
  studyInstanceUid: string,
  orderId: string,
): Promise<
  Array<
    Pick<
      InstanceHeader,
      'accessionNumber' | 'patientId' | 'issuerOfPatientId' | 'issuerOfAccessionNumber'
    >
  >
> {
  const rows = (await m.query(
    `SELECT DISTINCT header->'accessionNumber' AS a, header->'patientId' AS p,
            header->'issuerOfPatientId' AS ip, header->'issuerOfAccessionNumber' AS ia
       FROM study_instances
      WHERE study_instance_uid = $1 AND order_id IS DISTINCT FROM $2`,
    [studyInstanceUid, orderId],
  )) as Array<{
    a: string | null;
    p: string | null;
    ip: string | null;
    ia: InstanceHeader['issuerOfAccessionNumber'] | null;
  }>;
  return rows.map((r) => ({
    ...(r.a != null ? { accessionNumber: r.a } : {}),
    ...(r.p != null ? { patientId: r.p } : {}),
    ...(r.ip != null ? { issuerOfPatientId: r.ip } : {}),
    ...(r.ia != null ? { issuerOfAccessionNumber: r.ia } : {}),
  }));
}

/**
 * Held instances (unmatched, hold not over) under another accession number than `accession`,
 * counted by accession and study: the candidates a caller compares loosely (at most `limit`
 * groups). Reads the unmatched rows only (their partial index).
 */
export async function heldAccessionsOtherThan(
  m: EntityManager,
  accession: string,
  now: Date,
  limit = 1000,
): Promise<Array<{ accessionNumber: string; studyInstanceUid: string; count: number }>> {
  const rows = (await m.query(
    `SELECT accession_number, study_instance_uid, count(*)::int AS count FROM study_instances
      WHERE order_id IS NULL AND hold_until > $2 AND accession_number IS NOT NULL
        AND accession_number <> $1
      GROUP BY accession_number, study_instance_uid LIMIT $3`,
    [accession, now, limit],
  )) as Array<{ accession_number: string; study_instance_uid: string; count: number }>;
  return rows.map((r) => ({
    accessionNumber: r.accession_number,
    studyInstanceUid: r.study_instance_uid,
    count: r.count,
  }));
}

/** Of these orders, those whose study is not released (their package and pulled files live). */
export async function unreleasedAcquisitions(
  m: EntityManager,
  orderIds: string[],
): Promise<Set<string>> {
  if (orderIds.length === 0) return new Set();
  const rows = (await m.query(
    `SELECT order_id::text FROM study_acquisitions
      WHERE order_id = ANY($1::uuid[]) AND state <> 'released'`,
    [orderIds],
  )) as Array<{ order_id: string }>;
  return new Set(rows.map((r) => r.order_id));
}

/** Of these SOP Instance UIDs, the file each one's row names (those with a row). */
export async function filesOfInstances(
  m: EntityManager,
  sopInstanceUids: string[],
): Promise<Set<string>> {
  if (sopInstanceUids.length === 0) return new Set();
  const rows = (await m.query(
    `SELECT file_path FROM study_instances WHERE sop_instance_uid = ANY($1::text[])`,
    [sopInstanceUids],
  )) as Array<{ file_path: string }>;
  return new Set(rows.map((r) => r.file_path));
}

/** Deletes the rows of unmatched instances whose hold has passed; returns them. */
export async function deleteExpiredUnmatched(
  m: EntityManager,
  now: Date,
  limit = 1000,
): Promise<StoredInstance[]> {
  const rows = returned<InstanceRow>(
    await m.query(
      `DELETE FROM study_instances WHERE id IN (
        SELECT id FROM study_instances WHERE order_id IS NULL AND hold_until <= $1
         ORDER BY hold_until LIMIT $2 FOR UPDATE SKIP LOCKED)
      RETURNING ${INSTANCE_COLUMNS}`,
      [now, limit],
    ),
  );
  return rows.map(toInstance);
}

export async function deleteInstancesOfOrder(
  m: EntityManager,
  orderId: string,
): Promise<StoredInstance[]> {
  const rows = returned<InstanceRow>(
    await m.query(`DELETE FROM study_instances WHERE order_id = $1 RETURNING ${INSTANCE_COLUMNS}`, [
      orderId,
    ]),
  );
  return rows.map(toInstance);
}

// ---- study_acquisitions ----

export type AcquisitionState = 'waiting' | 'packaged' | 'failed' | 'released';

export interface AcquisitionRow {
  order_id: string;
  state: AcquisitionState;
  source: string | null;
  study_instance_uid: string | null;
  observed_count: number | null;
  stable_since: Date | null;
  checked_at: Date | null;
  lease_until: Date | null;
  package_path: string | null;
  package_size: string | null;
  packaged_at: Date | null;
  sidecar_sha256: string | null;
  study: unknown;
  failure_reason: string | null;
}

/**
 * Takes the order's acquisition lease (one worker at a time, on any replica): returns the
 * row when taken, undefined when another worker holds an unexpired lease. The lease is on the
 * database's clock (`now` is only the time checked, on the caller's).
 */
export async function takeLease(
  m: EntityManager,
  orderId: string,
  now: Date,
  leaseMs: number,
): Promise<AcquisitionRow | undefined> {
  await m.query(
    `INSERT INTO study_acquisitions (order_id, state) VALUES ($1, 'waiting') ON CONFLICT (order_id) DO NOTHING`,
    [orderId],
  );
  const rows = returned<AcquisitionRow>(
    await m.query(
      `UPDATE study_acquisitions
          SET lease_until = now() + $3 * interval '1 millisecond', checked_at = $2, updated_at = now()
        WHERE order_id = $1 AND (lease_until IS NULL OR lease_until <= now())
      RETURNING *`,
      [orderId, now, leaseMs],
    ),
  );
  return rows[0];
}

export async function updateAcquisition(
  m: EntityManager,
  orderId: string,
  fields: Partial<Omit<AcquisitionRow, 'order_id'>>,
): Promise<void> {
  const entries = Object.entries(fields).filter(([, v]) => v !== undefined);
  if (entries.length === 0) return;
  const sets = entries.map(([k], i) => `${k} = $${i + 2}${k === 'study' ? '::jsonb' : ''}`);
  await m.query(
    `UPDATE study_acquisitions SET ${sets.join(', ')}, updated_at = now() WHERE order_id = $1`,
    [orderId, ...entries.map(([k, v]) => (k === 'study' && v !== null ? pgJson(v) : v))],
  );
}

export async function findAcquisition(
  m: EntityManager,
  orderId: string,
): Promise<AcquisitionRow | undefined> {
  const rows = (await m.query(`SELECT * FROM study_acquisitions WHERE order_id = $1`, [
    orderId,
  ])) as AcquisitionRow[];
  return rows[0];
}

/** Orders whose package of this study exists (not released), newest first. */
export async function packagesOfStudy(
  m: EntityManager,
  studyInstanceUid: string,
): Promise<Array<{ orderId: string; packagedAt: Date; sizeBytes: number; packagePath: string }>> {
  const rows = (await m.query(
    `SELECT order_id, packaged_at, package_size, package_path FROM study_acquisitions
      WHERE study_instance_uid = $1 AND state = 'packaged' ORDER BY packaged_at DESC`,
    [studyInstanceUid],
  )) as Array<{ order_id: string; packaged_at: Date; package_size: string; package_path: string }>;
  return rows.map((r) => ({
    orderId: r.order_id,
    packagedAt: new Date(r.packaged_at),
    sizeBytes: Number(r.package_size),
    packagePath: r.package_path,
  }));
}

/**
 * Whether some order's acquisition of this study from `source` holds its lease now: a retrieve
 * (a C-MOVE whose sub-operations our SCP receives) may be under way, on any replica.
 */
export async function retrieveOfStudyUnderWay(
  db: Queryable,
  studyInstanceUid: string,
  source: string,
): Promise<boolean> {
  const rows = (await db.query(
    `SELECT 1 FROM study_acquisitions
      WHERE study_instance_uid = $1 AND source = $2 AND lease_until > now() LIMIT 1`,
    [studyInstanceUid, source],
  )) as unknown[];
  return rows.length > 0;
}

/** Pushes the acquisition lease forward (a long retrieve keeps its lease while it works). */
export async function renewLease(db: Queryable, orderId: string, leaseMs: number): Promise<void> {
  await db.query(
    `UPDATE study_acquisitions SET lease_until = now() + $2 * interval '1 millisecond' WHERE order_id = $1`,
    [orderId, leaseMs],
  );
}

/** Gives the acquisition lease back (the next acquire() may take it at once). */
export async function clearLease(db: Queryable, orderId: string): Promise<void> {
  await db.query(`UPDATE study_acquisitions SET lease_until = NULL WHERE order_id = $1`, [orderId]);
}

/** The package and staged instances are gone: the acquisition is released. */
export async function markReleased(m: EntityManager, orderId: string): Promise<void> {
  await m.query(
    `UPDATE study_acquisitions SET state = 'released', package_path = NULL, lease_until = NULL, updated_at = now()
          WHERE order_id = $1`,
    [orderId],
  );
}

/** Records that the order's study cannot be used (creates the row when there is none). */
export async function markFailed(m: EntityManager, orderId: string, reason: string): Promise<void> {
  await m.query(
    `INSERT INTO study_acquisitions (order_id, state, failure_reason) VALUES ($1, 'failed', $2)
         ON CONFLICT (order_id) DO UPDATE SET state = 'failed', failure_reason = $2, updated_at = now()`,
    [orderId, reason],
  );
}
