import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from 'pg';
import { TEST_TOKENS } from '../helpers/adapter';
import { createMrBrainSeries, generateUid, type DicomInstance } from '../helpers/dicom-factory';
import { ackSummary } from '../helpers/hl7-fixtures';
import { multipartRelated } from '../studies/study-test-support';

/** The sandbox's default client (docs/sandbox.md). */
export const SANDBOX_CLIENT = {
  IMAGING_CLIENT_ID: 'sandbox-client',
  IMAGING_CLIENT_SECRET: 'sandbox-secret',
  IMAGING_ORGANIZATION_ID: 'sandbox-org',
};

/**
 * A site configuration as a hospital would write it: its local RIS code for "MRT Kopf"
 * runs the vendor's brain volumetry product (the sandbox's product ids).
 */
export function writeSiteConfig(dir: string): string {
  const path = join(dir, 'site.yaml');
  writeFileSync(
    path,
    [
      'site:',
      '  name: e2e test hospital',
      'mappings:',
      '  hl7:',
      '    productTable:',
      '      - code: MRKOPF',
      '        products: [neuro-volumetry]',
      '        note: local RIS code MRT Kopf',
      '      - code: MRKOPFHC',
      '        products: [neuro-volumetry, hippocampal-atrophy]',
      '        note: local RIS code MRT Kopf mit Hippocampus-Volumetrie',
      '',
    ].join('\n'),
  );
  return path;
}

export interface Hl7OrderSpec {
  placer: string;
  accession: string;
  studyUid: string;
  patientId: string;
  note?: string;
  placerGroup?: string;
  controlId?: string;
  orderControl?: 'NW' | 'CA' | 'XO';
  /** Local RIS procedure code (the site table maps it to products); default MRKOPF. */
  procedure?: string;
  /** ORC-7.6 / OBR-27.6 priority (table 0485): R routine, S stat, A asap. */
  priority?: 'R' | 'S' | 'A';
}

/**
 * An ORM^O01 (v2.3.1) shaped like the IHE SWF RAD-2/RAD-4 messages RIS systems send:
 * PID with two identifiers, PV1, ORC/OBR with the local procedure code, accession in
 * OBR-18, modality in OBR-24, Study Instance UID in the ZDS segment, an NTE comment.
 */
export function ormMessage(spec: Hl7OrderSpec): Buffer {
  const control = spec.controlId ?? `MSG${spec.placer}${spec.orderControl ?? 'NW'}`;
  const segments = [
    `MSH|^~\\&|RADIS1|E2EHOSP|AIADAPTER|E2EHOSP|20261121093000||ORM^O01|${control}|P|2.3.1`,
    `PID|||${spec.patientId}^^^E2EHOSP^MR||MUSTERMANN^ERIKA^^^^^L||19640812|F|||Lindenweg 3^^Hamburg^^20095^DE`,
    `PV1||O|RAD^^^RADIOLOGIE|||||4711^ARZT^PAULA^^^DR|||||||||||V-${spec.placer}^^^E2EHOSP^VN`,
    `ORC|${spec.orderControl ?? 'NW'}|${spec.placer}^RADIS1||${spec.placerGroup ? `${spec.placerGroup}^RADIS1` : ''}|SC||^^^20261121100000^^${spec.priority ?? 'R'}||20261121093000|^CLERK^CARL||4711^ARZT^PAULA^^^DR`,
    `OBR|1|${spec.placer}^RADIS1||${spec.procedure ?? 'MRKOPF'}^MRT Kopf^L||20261121100000|||||||Gedaechtnisstoerung seit 6 Monaten|||4711^ARZT^PAULA^^^DR||${spec.accession}|RP-${spec.placer}|SPS-${spec.placer}||||MR|||^^^20261121100000^^${spec.priority ?? 'R'}`,
    ...(spec.note ? [`NTE|1|L|${spec.note}`] : []),
    `ZDS|${spec.studyUid}^RADIS1^Application^DICOM`,
  ];
  return Buffer.from(segments.join('\r') + '\r', 'latin1');
}

/** A generated MR brain study for an order (real 12-bit pixel data). */
export function studyFor(spec: {
  accession: string;
  studyUid: string;
  patientId: string;
  slices?: number;
  rows?: number;
}): DicomInstance[] {
  return createMrBrainSeries({
    patient: {
      patientId: spec.patientId,
      patientName: 'MUSTERMANN^ERIKA',
      birthDate: '19640812',
      sex: 'F',
    },
    study: { studyInstanceUid: spec.studyUid, accessionNumber: spec.accession },
    series: { slices: spec.slices ?? 4, rows: spec.rows ?? 32, columns: spec.rows ?? 32 },
    seed: 7,
  });
}

let counter = 0;
export function newOrderSpec(note?: string): Hl7OrderSpec {
  counter++;
  const n = `${Date.now().toString(36)}${counter}`.toUpperCase();
  return {
    placer: `PLC-${n}`,
    accession: `ACC-${n}`,
    studyUid: generateUid(),
    patientId: `PAT-${n}`,
    note,
  };
}

/**
 * Polls `fn` until it answers. On a timeout the error carries `diagnose()`'s text (e.g.
 * `orderDiagnostics`: the order's state and audit timeline), so a CI failure says where the
 * order stood rather than only that it was late.
 */
export async function waitFor<T>(
  what: string,
  fn: () => Promise<T | undefined | null | false>,
  timeoutMs = 60_000,
  everyMs = 200,
  diagnose?: () => Promise<string>,
): Promise<T> {
  const started = Date.now();
  for (;;) {
    const value = await fn();
    if (value) return value;
    if (Date.now() - started > timeoutMs) {
      const detail = diagnose
        ? await diagnose().catch((e: unknown) => `(diagnostics failed: ${(e as Error).message})`)
        : '';
      throw new Error(
        `timed out waiting for ${what} after ${timeoutMs} ms${detail ? `\n${detail}` : ''}`,
      );
    }
    await sleep(everyMs);
  }
}

/**
 * Where an order stands, for a wait that timed out: its row (state, upstream status, lease),
 * its audit timeline (ms since the first entry), its jobs (queued, locked, failed, in the job
 * outbox), its study acquisition and its upload progress.
 */
export async function orderDiagnostics(db: Client, orderId: string): Promise<string> {
  const lines: string[] = [];
  const order = await db.query(
    `SELECT state, upstream_order_id, upstream_status, lease_owner, lease_until, place_attempted_at,
            upload_started_at, upload_completed_at, last_error, alert, now() AS db_now
       FROM orders WHERE id = $1`,
    [orderId],
  );
  lines.push(`order ${orderId}: ${JSON.stringify(order.rows[0] ?? null)}`);
  const audit = await db.query(
    `SELECT occurred_at, kind, summary, detail FROM audit_events WHERE order_id = $1 ORDER BY id`,
    [orderId],
  );
  const t0 = audit.rows[0] ? new Date(audit.rows[0].occurred_at as string).getTime() : 0;
  lines.push(`audit (${audit.rows.length}):`);
  for (const r of audit.rows) {
    const at = new Date(r.occurred_at as string).getTime() - t0;
    const d = r.detail as Record<string, unknown> | null;
    const worker = d && typeof d.worker === 'string' ? ` [${d.worker}]` : '';
    lines.push(`  +${at} ms ${r.kind as string}: ${r.summary as string}${worker}`);
  }
  if (t0 && order.rows[0]) {
    lines.push(`  +${new Date(order.rows[0].db_now as string).getTime() - t0} ms (now)`);
  }
  const jobs = await db.query(
    `SELECT t.identifier AS task, j.key, j.run_at, j.attempts, j.max_attempts, j.last_error,
            j.locked_at, j.locked_by
       FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id
      WHERE j.payload->>'orderId' = $1 ORDER BY j.id`,
    [orderId],
  );
  lines.push(`jobs (${jobs.rows.length}): ${JSON.stringify(jobs.rows)}`);
  const outbox = await db.query(
    `SELECT task, job_key, run_at FROM job_outbox WHERE payload->>'orderId' = $1 ORDER BY id`,
    [orderId],
  );
  if (outbox.rows.length > 0) lines.push(`job outbox: ${JSON.stringify(outbox.rows)}`);
  const acquisition = await db.query(
    `SELECT state, source, observed_count, stable_since, lease_until, updated_at
       FROM study_acquisitions WHERE order_id = $1`,
    [orderId],
  );
  lines.push(`acquisition: ${JSON.stringify(acquisition.rows[0] ?? null)}`);
  const upstreamId = order.rows[0]?.upstream_order_id as string | undefined;
  if (upstreamId) {
    const progress = await db.query(
      `SELECT part_count, parts, started_at, updated_at FROM imaging_upload_progress WHERE order_id = $1`,
      [upstreamId],
    );
    lines.push(`upload progress: ${JSON.stringify(progress.rows[0] ?? null)}`);
  }
  const workers = await db.query(
    `SELECT worker_id, process, heartbeat_at FROM job_worker_heartbeats ORDER BY process`,
  );
  lines.push(`job worker heartbeats: ${JSON.stringify(workers.rows)}`);
  return lines.join('\n');
}

export async function orderByPlacer(db: Client, placer: string) {
  const { rows } = await db.query(
    `SELECT id, state, upstream_order_id, upstream_status, alert FROM orders WHERE placer_order_number = $1`,
    [placer],
  );
  return rows[0] as
    | {
        id: string;
        state: string;
        upstream_order_id: string | null;
        upstream_status: string | null;
        alert: string | null;
      }
    | undefined;
}

export async function orderState(db: Client, id: string): Promise<string> {
  return (await db.query(`SELECT state FROM orders WHERE id = $1`, [id])).rows[0]?.state as string;
}

/** The states of several orders in one query (a pg Client runs one query at a time), in `ids` order. */
export async function orderStates(db: Client, ids: readonly string[]): Promise<string[]> {
  const { rows } = await db.query<{ id: string; state: string }>(
    `SELECT id, state FROM orders WHERE id = ANY($1::uuid[])`,
    [ids],
  );
  const byId = new Map(rows.map((r) => [r.id, r.state]));
  return ids.map((id) => byId.get(id) ?? '');
}

export async function upstreamStatuses(db: Client, id: string): Promise<string[]> {
  const { rows } = await db.query(
    `SELECT detail->>'upstreamStatus' AS s FROM audit_events
      WHERE order_id = $1 AND kind = 'order.transition' AND detail ? 'upstreamStatus' ORDER BY id`,
    [id],
  );
  return rows.map((r) => r.s as string);
}

/**
 * The FHIR twin of `ormMessage`: a ServiceRequest with its Patient contained, placer and
 * accession (typed ACSN) identifiers, a LOINC MR head code, and the sandbox outcome as a note.
 */
export function serviceRequestFor(
  spec: { placer: string; accession: string; patientId: string },
  extra: {
    outcome?: string;
    occurrenceDateTime?: string;
    requesterDisplay?: string;
    /** Base of the placer and accession identifier systems (default http://e2e.example). */
    identifierBase?: string;
  } = {},
): Record<string, unknown> {
  const base = extra.identifierBase ?? 'http://e2e.example';
  return {
    resourceType: 'ServiceRequest',
    contained: [
      {
        resourceType: 'Patient',
        id: 'p1',
        identifier: [{ system: 'urn:oid:1.2.276.0.99.1', value: spec.patientId }],
        name: [{ family: 'Mustermann', given: ['Erika'] }],
        gender: 'female',
        birthDate: '1964-08-12',
      },
    ],
    identifier: [
      { system: `${base}/ehr/orders`, value: spec.placer },
      {
        type: {
          coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'ACSN' }],
        },
        system: `${base}/accession`,
        value: spec.accession,
      },
    ],
    status: 'active',
    intent: 'order',
    code: {
      coding: [{ system: 'http://loinc.org', code: '30799-1', display: 'MR Head WO contrast' }],
    },
    subject: { reference: '#p1' },
    ...(extra.occurrenceDateTime ? { occurrenceDateTime: extra.occurrenceDateTime } : {}),
    ...(extra.requesterDisplay ? { requester: { display: extra.requesterDisplay } } : {}),
    note: [{ text: `sandbox-outcome: ${extra.outcome ?? 'delivered'}` }],
  };
}

/**
 * The usual way a test gets an order placed with its study: the study pushed by STOW-RS (200),
 * then the ORM over MLLP (AA); answers the stored order's id.
 */
export async function placeWithStudy(
  peers: { adapter: { httpUrl: string }; mllp: { send(m: Buffer): Promise<Buffer> }; db: Client },
  spec: Hl7OrderSpec,
): Promise<string> {
  const { body, contentType } = multipartRelated(studyFor(spec).map((i) => ({ data: i.bytes })));
  const res = await fetch(`${peers.adapter.httpUrl}/dicomweb/studies`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TEST_TOKENS.sender}`, 'content-type': contentType },
    body,
  });
  expect(res.status).toBe(200);
  expect(ackSummary(await peers.mllp.send(ormMessage(spec))).code).toBe('AA');
  return (await waitFor('the order', () => orderByPlacer(peers.db, spec.placer))).id as string;
}
