/**
 * `npm run demo`: two real-world-shaped orders through a running adapter, each printed
 * on its way to its end.
 *
 * 1. Start the adapter (embedded PostgreSQL, in-process sandbox upstream) with the demo site
 *    configuration, which maps the RIS code and FHIR procedures to the sandbox's products:
 *
 *      CONFIG_FILE=scripts/demo-site.yaml npm start
 *
 *    (With nothing else configured a pushed study is packaged after 5 quiet seconds.)
 *
 *    The first start prints one bearer token per role; keep the admin one.
 * 2. In another terminal: `DEMO_TOKEN=<admin token> npm run demo`.
 *
 * What it does: pushes a generated MR brain study per order (dcmjs, real 12-bit pixel data)
 * to the STOW-RS endpoint, sends an ORM^O01 (v2.3.1, IHE SWF shape) over MLLP and a FHIR R4
 * ServiceRequest over HTTP, then follows both orders through `GET /api/orders/{id}`,
 * running a poll cycle every few seconds (`POST /api/orders/poll-cycle`, admin) instead of
 * waiting for POLL_INTERVAL_SECONDS. The FHIR order is made to fail QC in the sandbox; the
 * demo then records a clinician's QC bypass (who, why) and it goes on to DELIVERED. Each
 * order ends with a link to its timeline on the audit page.
 *
 * Settings: DEMO_URL (http://127.0.0.1:8080), DEMO_MLLP_HOST / DEMO_MLLP_PORT (127.0.0.1:2575),
 * DEMO_TOKEN (admin bearer token; required), DEMO_TIMEOUT_SECONDS (300).
 *
 * By hand (the README's quick start), one step at a time:
 *   npm run demo -- push-study <accession> <patient id>   a generated MR study over STOW-RS
 *   npm run demo -- send-hl7 <file>                        an HL7 file over MLLP (prints the ACK)
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { MllpClient } from '../src/hl7';
import { createMrBrainSeries, generateUid } from '../test/helpers/dicom-factory';

const URL_BASE = (process.env.DEMO_URL ?? 'http://127.0.0.1:8080').replace(/\/$/, '');
const MLLP_HOST = process.env.DEMO_MLLP_HOST ?? '127.0.0.1';
const MLLP_PORT = Number(process.env.DEMO_MLLP_PORT ?? 2575);
const TOKEN = process.env.DEMO_TOKEN ?? '';
const TIMEOUT_MS = Number(process.env.DEMO_TIMEOUT_SECONDS ?? 300) * 1000;

const say = (line: string) => process.stdout.write(`${line}\n`);

async function api(path: string, init: { method?: string; body?: unknown } = {}) {
  const res = await fetch(`${URL_BASE}${path}`, {
    method: init.method ?? 'GET',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

function ormO01(o: { placer: string; accession: string; studyUid: string; patientId: string }) {
  const now = new Date().toISOString().replace(/[-:T]/g, '').slice(0, 14);
  return Buffer.from(
    [
      `MSH|^~\\&|RADIS1|DEMOHOSP|AIADAPTER|DEMOHOSP|${now}||ORM^O01|DEMO${o.placer}|P|2.3.1`,
      `PID|||${o.patientId}^^^DEMOHOSP^MR~998877665^^^SSA^SS||MUSTERMANN^ERIKA^M^^^^L||19640812|F|||Lindenweg 3^^Hamburg^^20095^DE||^PRN^PH^^49^40^5551234`,
      `PV1||O|RAD^^^RADIOLOGIE|||||4711^ARZT^PAULA^^^DR|||||||||||V-${o.placer}^^^DEMOHOSP^VN`,
      `ORC|NW|${o.placer}^RADIS1|||SC||^^^${now}^^R||${now}|^CLERK^CARL||4711^ARZT^PAULA^^^DR`,
      `OBR|1|${o.placer}^RADIS1||MRKOPF^MRT Kopf nativ^L||${now}|||||||Gedaechtnisstoerung seit 6 Monaten|||4711^ARZT^PAULA^^^DR||${o.accession}|RP-${o.placer}|SPS-${o.placer}||||MR|||^^^${now}^^R`,
      'NTE|1|L|Bitte volumetrische Auswertung. sandbox-outcome: delivered',
      `ZDS|${o.studyUid}^RADIS1^Application^DICOM`,
    ].join('\r') + '\r',
    'latin1',
  );
}

function serviceRequest(o: { placer: string; accession: string; patientId: string }) {
  return {
    resourceType: 'ServiceRequest',
    contained: [
      {
        resourceType: 'Patient',
        id: 'pat',
        identifier: [{ system: 'urn:oid:1.2.276.0.76.4.8', value: o.patientId }],
        name: [{ family: 'Beispiel', given: ['Max'] }],
        gender: 'male',
        birthDate: '1958-03-02',
      },
    ],
    identifier: [
      {
        type: {
          coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'PLAC' }],
        },
        system: 'http://demo-hospital.example/ehr/orders',
        value: o.placer,
      },
      {
        type: {
          coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'ACSN' }],
        },
        system: 'http://demo-hospital.example/accession',
        value: o.accession,
      },
    ],
    status: 'active',
    intent: 'order',
    category: [{ coding: [{ system: 'http://snomed.info/sct', code: '363679005' }] }],
    code: {
      coding: [{ system: 'http://loinc.org', code: '30799-1', display: 'MR Head WO contrast IV' }],
    },
    subject: { reference: '#pat' },
    occurrenceDateTime: new Date().toISOString(),
    requester: { display: 'Dr. Paula Arzt' },
    reasonCode: [{ text: 'Progressive memory complaints' }],
    note: [{ text: 'sandbox-outcome: qc_failed' }],
  };
}

async function stow(instances: Buffer[]): Promise<number> {
  const boundary = `demo${randomBytes(8).toString('hex')}`;
  const parts: Buffer[] = [];
  for (const data of instances) {
    parts.push(
      Buffer.from(`--${boundary}\r\nContent-Type: application/dicom\r\n\r\n`),
      data,
      Buffer.from('\r\n'),
    );
  }
  parts.push(Buffer.from(`--${boundary}--\r\n`));
  const res = await fetch(`${URL_BASE}/dicomweb/studies`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${TOKEN}`,
      'content-type': `multipart/related; type="application/dicom"; boundary=${boundary}`,
      accept: 'application/dicom+json',
    },
    body: Buffer.concat(parts),
  });
  await res.arrayBuffer();
  return res.status;
}

function studyOf(o: { accession: string; studyUid: string; patientId: string }, name: string) {
  return createMrBrainSeries({
    patient: { patientId: o.patientId, patientName: name, birthDate: '19640812', sex: 'F' },
    study: { studyInstanceUid: o.studyUid, accessionNumber: o.accession },
    series: { slices: 8, rows: 64, columns: 64 },
  }).map((i) => i.bytes);
}

async function main(): Promise<void> {
  if (!TOKEN) {
    say('DEMO_TOKEN is not set: give the admin bearer token printed by the first `npm start`.');
    process.exit(2);
  }
  const health = await fetch(`${URL_BASE}/health`).catch(() => undefined);
  if (!health?.ok) {
    say(
      `No adapter answers at ${URL_BASE}/health: start it first (see the top of scripts/demo.ts).`,
    );
    process.exit(2);
  }
  const tag = Date.now().toString(36).toUpperCase();
  const hl7 = {
    placer: `DEMO-${tag}-1`,
    accession: `DACC${tag}1`,
    studyUid: generateUid(),
    patientId: `DEMO-PAT-${tag}`,
  };
  const fhir = {
    placer: `DEMO-${tag}-2`,
    accession: `DACC${tag}2`,
    studyUid: generateUid(),
    patientId: `DEMO-PAT-${tag}-F`,
  };

  // The PACS routes the studies to us as soon as they are acquired (here before the orders
  // arrive: they are held until their order is placed; pushed later, the acquirer finds them
  // at its next try).
  say('Pushing the generated studies to STOW-RS /dicomweb/studies');
  say(`  HL7 order's study: HTTP ${await stow(studyOf(hl7, 'MUSTERMANN^ERIKA'))}`);
  say(`  FHIR order's study: HTTP ${await stow(studyOf(fhir, 'BEISPIEL^MAX'))}`);

  say(`ORM^O01 over MLLP to ${MLLP_HOST}:${MLLP_PORT} (placer ${hl7.placer})`);
  const mllp = new MllpClient({ host: MLLP_HOST, port: MLLP_PORT, responseTimeoutMs: 10_000 });
  const ack = (await mllp.send(ormO01(hl7))).toString('latin1');
  await mllp.close();
  say(`  answer: ${ack.split('\r').find((s) => s.startsWith('MSA')) ?? ack.slice(0, 80)}`);

  say(`FHIR ServiceRequest to ${URL_BASE}/fhir (placer ${fhir.placer})`);
  const created = await fetch(`${URL_BASE}/fhir/ServiceRequest`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/fhir+json' },
    body: JSON.stringify(serviceRequest(fhir)),
  });
  const createdBody = (await created.json().catch(() => ({}))) as { id?: string };
  say(
    `  answer: HTTP ${created.status}${createdBody.id ? `, ServiceRequest/${createdBody.id}` : ''}`,
  );
  if (created.status === 404) say('  (the FHIR front door is not in this build)');

  // Our order ids: the HL7 one from the audit search, the FHIR one is the resource id.
  const orders: Array<{ label: string; id: string }> = [];
  const hl7Id = await findOrder(hl7.accession);
  if (hl7Id) orders.push({ label: 'HL7 ORM^O01', id: hl7Id });
  if (createdBody.id) {
    const fhirId = (await findOrder(fhir.accession)) ?? createdBody.id;
    orders.push({ label: 'FHIR ServiceRequest', id: fhirId });
  }

  const seen = new Map<string, string>();
  const ended = new Set<string>();
  let bypassed = false;
  const started = Date.now();
  while (ended.size < orders.length && Date.now() - started < TIMEOUT_MS) {
    await api('/api/orders/poll-cycle', { method: 'POST' });
    for (const o of orders) {
      if (ended.has(o.id)) continue;
      const { status, body } = await api(`/api/orders/${o.id}`);
      if (status !== 200) continue;
      const line = `${body.state}${body.upstreamStatus ? ` (upstream ${body.upstreamStatus})` : ''}`;
      if (seen.get(o.id) !== line) {
        seen.set(o.id, line);
        const secs = ((Date.now() - started) / 1000).toFixed(0).padStart(3);
        say(
          `[${secs}s] ${o.label.padEnd(19)} ${line}${body.alert ? `  alert: ${body.alert}` : ''}`,
        );
      }
      if (body.state === 'qc-hold' && !bypassed) {
        bypassed = true;
        const res = await api(`/api/orders/${o.id}/qc-bypass`, {
          method: 'POST',
          body: { reason: 'Motion artefact on two slices only; volumetry still meaningful (demo)' },
        });
        say(`       ${o.label.padEnd(19)} QC bypass requested by a clinician: HTTP ${res.status}`);
      }
      if (['delivered', 'failed', 'cancelled'].includes(String(body.state))) {
        ended.add(o.id);
        const documents = await documentsOf(o.id, String(body.upstreamStatus));
        say(`       ${o.label.padEnd(19)} documents: ${documents.join(', ') || 'none'}`);
        say(`       ${o.label.padEnd(19)} audit timeline: ${URL_BASE}/audit/orders/${o.id}`);
      }
    }
    await sleep(2_000);
  }
  if (ended.size < orders.length) {
    say('Not every order ended in time; their timelines on the audit page say where they are:');
    for (const o of orders) say(`  ${URL_BASE}/audit/orders/${o.id}`);
    process.exitCode = 1;
  }
}

/** Documents are fetched by a job just after the end: give it a few seconds. */
async function documentsOf(id: string, upstreamStatus: string): Promise<string[]> {
  const expected =
    upstreamStatus === 'DELIVERED' || /^(PREPROCESSING_)?FAILED$/.test(upstreamStatus);
  let documents: string[] = [];
  for (let i = 0; i < 20; i++) {
    documents = ((await api(`/api/orders/${id}`)).body.documents as string[]) ?? [];
    if (!expected || documents.some((d) => /^(results|failure)\//.test(d))) return documents;
    await sleep(500);
  }
  return documents;
}

async function findOrder(accession: string): Promise<string | undefined> {
  for (let i = 0; i < 20; i++) {
    const { status, body } = await api(
      `/api/audit/orders?accession=${encodeURIComponent(accession)}`,
    );
    const items = (body.items ?? body.orders ?? body.results) as Array<{ id: string }> | undefined;
    if (status === 200 && items?.[0]) return items[0].id;
    await sleep(250);
  }
  return undefined;
}

/** `push-study` and `send-hl7`: the quick start's steps by hand. */
async function byHand(command: string, args: string[]): Promise<void> {
  if (command !== 'send-hl7' && command !== 'push-study')
    throw new Error(`unknown command ${command}: push-study or send-hl7 (or none: the whole demo)`);
  if (command === 'send-hl7') {
    if (!args[0]) throw new Error('usage: npm run demo -- send-hl7 <file>');
    // One segment per line in the file; HL7 wants CR between segments.
    const text = readFileSync(args[0], 'latin1').replace(/\r?\n/g, '\r').replace(/\r*$/, '\r');
    const mllp = new MllpClient({ host: MLLP_HOST, port: MLLP_PORT, responseTimeoutMs: 10_000 });
    try {
      const ack = (await mllp.send(Buffer.from(text, 'latin1'))).toString('latin1');
      say(ack.split('\r').filter(Boolean).join('\n'));
    } finally {
      await mllp.close();
    }
    return;
  }
  const [accession, patientId] = args;
  if (!accession || !patientId)
    throw new Error('usage: npm run demo -- push-study <accession> <patient id>');
  if (!TOKEN) throw new Error('DEMO_TOKEN is not set: give a sender or admin bearer token.');
  const status = await stow(
    studyOf({ accession, patientId, studyUid: generateUid() }, 'DEMO^PATIENT'),
  );
  say(
    `STOW-RS ${URL_BASE}/dicomweb/studies: HTTP ${status} (accession ${accession}, patient ${patientId})`,
  );
  if (status !== 200) process.exitCode = 1;
}

const [command, ...rest] = process.argv.slice(2);
const run = command ? byHand(command, rest) : main();
run.catch((error: unknown) => {
  say(`demo failed: ${(error as Error).message}`);
  process.exit(1);
});
