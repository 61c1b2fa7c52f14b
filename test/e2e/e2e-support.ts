import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from 'pg';
import { createMrBrainSeries, generateUid, type DicomInstance } from '../helpers/dicom-factory';

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

export async function waitFor<T>(
  what: string,
  fn: () => Promise<T | undefined | null | false>,
  timeoutMs = 60_000,
  everyMs = 200,
): Promise<T> {
  const started = Date.now();
  for (;;) {
    const value = await fn();
    if (value) return value;
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await sleep(everyMs);
  }
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
