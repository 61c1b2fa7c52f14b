import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as iconv from 'iconv-lite';
import { Client as PgClient } from 'pg';
import type { DiagnosticReport, Task } from '@medplum/fhirtypes';
import { containedIssues } from '../../src/fhir/fhir-validator';
import { MllpClient } from '../../src/hl7';
import { parseHl7, type Hl7Message } from '../../src/hl7/hl7-message';
import { TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { ackSummary, hl7Fixture, withControlId } from '../helpers/hl7-fixtures';
import { startMllpHarness, type MllpHarness } from '../helpers/mllp-harness';
import { waitFor, writeSiteConfig } from '../e2e/e2e-support';
import {
  startAckingRis,
  startValidatingEhr,
  type TestEhr,
  type TestRis,
} from '../outbound/outbound-peers';

jest.setTimeout(180_000);

/**
 * What we publish (ORU^R01 to the RIS, Task and DiagnosticReport to the EHR) is valid for its
 * type whatever the order held. Orders come in through the front doors of a running adapter
 * (MLLP, FHIR REST) and are cancelled, which publishes a no-result report built from every
 * order field (PID, placer and filler numbers, procedure, accession, requested time). Each
 * case below was seen to break: a Task and DiagnosticReport refused by our own validation
 * (the EHR never heard of the cancellation), a patient name changed in the ORU, and OBR-7
 * written `0NaNNaNNaNNaNNaNNaN+0000`.
 */
describe('result values from hostile orders (MLLP and FHIR front doors)', () => {
  let ehr: TestEhr;
  let ris: TestRis;
  let harness: MllpHarness | undefined;
  let adapter: TestAdapter;
  let mllp: MllpClient;
  let db: PgClient;
  let n = 0;

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'result-values-'));
    ehr = await startValidatingEhr();
    ris = await startAckingRis();
    harness = await startMllpHarness({
      JOBS_ENABLED: 'true',
      FHIR_SERVER_URL: ehr.baseUrl,
      RIS_MLLP_HOST: '127.0.0.1',
      RIS_MLLP_PORT: String(ris.port),
      OUTBOUND_POLL_MS: '50',
      CONFIG_FILE: writeSiteConfig(dir),
      FHIR_UNKNOWN_PROCEDURE: 'default-products:neuro-volumetry',
    });
    ({ adapter, mllp, db } = harness);
  });

  afterAll(async () => {
    await harness?.close();
    await ris?.close();
    await ehr?.close();
  });

  /** Waits until the order's Task, DiagnosticReport and ORU rows are no longer pending. */
  async function published(orderId: string) {
    return waitFor(`the no-result report of ${orderId}`, async () => {
      const { rows } = await db.query<{ kind: string; status: string }>(
        `SELECT kind, status FROM outbox WHERE order_id = $1 ORDER BY id`,
        [orderId],
      );
      const kinds = new Set(rows.map((r) => r.kind));
      const done =
        ['fhir-task', 'fhir-diagnostic-report', 'hl7-oru'].every((k) => kinds.has(k)) &&
        rows.every((r) => r.status !== 'pending');
      return done && rows;
    });
  }

  function oruOf(orderId: string): { text: string; message: Hl7Message } {
    const text = ris.received.find((m) => m.includes(`${orderId}^IMAGING-AI-ADAPTER`));
    expect(text).toBeDefined();
    return { text: text!, message: parseHl7(text!) };
  }

  async function reportOf(orderId: string): Promise<DiagnosticReport | undefined> {
    const [dr] = await ehr.search<DiagnosticReport>(
      'DiagnosticReport',
      `identifier=urn:imaging-ai-adapter:diagnostic-report|${orderId}`,
    );
    return dr;
  }

  /** An ORM^O01 NW, then its CA: the order's fields end up in a published no-result report. */
  async function cancelledOverHl7(
    pid: string,
    obr4 = 'MRKOPF^MRT Kopf^L',
    /** MSH-18, and how the message's text becomes its bytes (default Latin-1, no MSH-18). */
    charset?: { msh18: string; encode: (text: string) => Buffer },
    version = '2.3.1',
    /** NW and CA in one message (judged in order, in one transaction): never placed first. */
    together = false,
    pv1 = 'PV1||O|RAD^^^RADIOLOGIE',
  ): Promise<string> {
    n += 1;
    const placer = `PLC-RV${n}-${Date.now()}`;
    const encode = charset?.encode ?? ((text: string) => Buffer.from(text, 'latin1'));
    const msh18 = charset ? `||||||${charset.msh18}` : '';
    const message = (control: 'NW' | 'CA') =>
      encode(
        [
          `MSH|^~\\&|RADIS1|HOSP|AIADAPTER|HOSP|20261125093000||ORM^O01|RV${n}${control}|P|${version}${msh18}`,
          pid,
          pv1,
          `ORC|${control}|${placer}^RADIS1||||||20261125093000`,
          `OBR|1|${placer}^RADIS1||${obr4}|||||||||||||||ACC-RV${n}|||||MR`,
        ].join('\r') + '\r',
      );
    if (together) {
      const [nw, ca] = [message('NW'), message('CA')].map((b) => b.toString('latin1').split('\r'));
      const both = [...nw!.slice(0, -1), ...ca!.slice(3)].join('\r');
      expect(ackSummary(await mllp.send(Buffer.from(both, 'latin1'))).code).toBe('AA');
    } else {
      expect(ackSummary(await mllp.send(message('NW'))).code).toBe('AA');
    }
    const { rows } = await db.query<{ id: string }>(
      `SELECT id FROM orders WHERE placer_order_number = $1`,
      [placer],
    );
    if (!together) expect(ackSummary(await mllp.send(message('CA'))).code).toBe('AA');
    return rows[0]!.id;
  }

  /** A ServiceRequest POSTed, then PUT as revoked: its order's no-result report is published. */
  async function revokedOverFhir(sr: { identifier: Array<{ value: string }> }): Promise<string> {
    const headers = {
      authorization: `Bearer ${TEST_TOKENS.sender}`,
      'content-type': 'application/fhir+json',
    };
    const created = await fetch(`${adapter.httpUrl}/fhir/ServiceRequest`, {
      method: 'POST',
      headers,
      body: JSON.stringify(sr),
    });
    expect(created.status).toBe(201);
    const stored = (await created.json()) as { id: string };
    const revoked = await fetch(`${adapter.httpUrl}/fhir/ServiceRequest/${stored.id}`, {
      method: 'PUT',
      headers,
      body: JSON.stringify({ ...sr, id: stored.id, status: 'revoked' }),
    });
    expect(revoked.status).toBe(200);
    const { rows } = await db.query<{ id: string }>(
      `SELECT id FROM orders WHERE placer_order_number = $1`,
      [sr.identifier[0]!.value],
    );
    return rows[0]!.id;
  }

  it('a PID-3 of spaces before the real id and an OBR-4 text of spaces: Task and DiagnosticReport reach the EHR', async () => {
    const id = await cancelledOverHl7(
      'PID|||   ^^^HOSP^MR~PAT-RV-1^^^HOSP^MR||DOE^JO||19640812|F',
      'MRKOPF^   ^L',
    );
    // before: both refused by our own R4 validation ("String must contain non-whitespace
    // content" on subject.identifier.value and code.coding[0].display) and dead-lettered
    expect(await published(id)).toEqual(
      expect.not.arrayContaining([expect.objectContaining({ status: 'dead' })]),
    );
    const dr = await reportOf(id);
    expect(dr).toMatchObject({
      status: 'cancelled',
      subject: { identifier: { system: 'HOSP', value: 'PAT-RV-1' } },
    });
    expect(dr!.code.coding?.[0]).toEqual({ code: 'MRKOPF' });
    const [task] = await ehr.search<Task>('Task', `identifier=urn:imaging-ai-adapter:order|${id}`);
    expect(task?.for?.identifier?.value).toBe('PAT-RV-1');
    // the ORU gives the RIS its own values back
    const { message } = oruOf(id);
    expect(message.get('OBR-4.2')).toBe('   ');
  });

  it('an ASCII order without MSH-18 writing é as \\XE9\\: the UTF-8 ORU names the same patient, framing intact', async () => {
    const id = await cancelledOverHl7(
      'PID|||PAT-RV-2^^^HOSP^MR||M\\XE9\\nard\\F\\\\X0B\\^Zo\\XEB\\||19640812|F',
    );
    await published(id);
    const { text, message } = oruOf(id);
    expect(message.msh.value(18)).toBe('UNICODE'); // v2.3.1 table 0211
    // before: \XE9\ copied as it was, one byte 0xE9 in a UTF-8 message: "M\uFFFDnard"
    expect(message.get('PID-5.1')).toBe('Ménard|\u000b');
    expect(message.get('PID-5.2')).toBe('Zoë');
    // eslint-disable-next-line no-control-regex
    expect(text.replaceAll('\r', '')).not.toMatch(/[\x00-\x1f\x7f]/);
  });

  it('formatting commands in the PID (\\.br\\ in a name and an address, \\.sp2\\, \\H\\ \\N\\): the ORU’s PID names the patient as the order was read, no formatting command outside FT', async () => {
    // v2.5.1 §2.7.6: formatting commands belong to FT; the intake reads `MEIER\.br\JR` as
    // `MEIER JR` (hl7-formatting.ts). Before, the ORU echoed the sender's PID as written:
    // PID-5 `MEIER\.br\JR^\H\HANS\N\\.sp2\X`, PID-11 `Weg 1\.br\Hof`, a line break inside an
    // XPN and an XAD for a RIS that renders the commands, and a name the order never held.
    const id = await cancelledOverHl7(
      'PID|||PAT-RV-FMT^^^HOSP^MR||MEIER\\.br\\JR^\\H\\HANS\\N\\\\.sp2\\X^^^^^L||19640812|M|||Weg 1\\.br\\Hof\\.in+4\\^^Bonn',
    );
    await published(id);
    const { text, message } = oruOf(id);
    const pid = text.split('\r').find((s) => s.startsWith('PID|'))!;
    expect(pid).not.toMatch(/\\(\.(br|sp|in|ti|sk|ce|fi|nf)[^\\]*|H|N)\\/);
    expect(message.get('PID-5.1')).toBe('MEIER JR');
    expect(message.get('PID-5.2')).toBe('HANS X');
    expect(message.get('PID-5.7')).toBe('L');
    expect(message.get('PID-11.1')).toBe('Weg 1 Hof');
    expect(message.get('PID-11.3')).toBe('Bonn');
  });

  it('PID and PV1 dates and Y/N indicators the intake does not read (PID-29, PID-30, PID-33, PV1-44, PV1-45): echoed when valid for their type, written empty when not', async () => {
    // v2.5.1: PID-29, PID-33, PV1-44 and PV1-45 are TS (a DTM), PID-24, PID-30 and PID-31 ID of
    // table 0136 (Y/N), PV1-29 a DT. Before, the ORU echoed whatever the order held there
    // (`abc`, `2026-11-25T10:00`, month 13, `maybe`), values a RIS validating the result
    // refuses, as it refuses a PID-7 of `19700230` (written empty since).
    const fields = (values: Record<number, string>, last: number) =>
      Array.from({ length: last }, (_, i) => values[i + 1] ?? '').join('|');
    const pid = `PID|${fields({ 3: 'PAT-RV-TS^^^HOSP^MR', 5: 'DOE^JO', 7: '19640812', 8: 'F', 24: 'J', 29: 'abc', 30: 'maybe', 31: 'N', 33: '2026-11-25T10:00' }, 33)}`;
    const pv1 = `PV1|${fields({ 2: 'O', 29: '20261301', 44: '20261325', 45: '202611251030+0100^M' }, 45)}`;
    const id = await cancelledOverHl7(pid, undefined, undefined, '2.5.1', false, pv1);
    await published(id);
    const { message } = oruOf(id);
    expect(
      ['PID-24', 'PID-29', 'PID-30', 'PID-31', 'PID-33', 'PV1-29', 'PV1-44', 'PV1-45'].map((at) => [
        at,
        message.get(at) ?? '',
      ]),
    ).toEqual([
      ['PID-24', ''],
      ['PID-29', ''],
      ['PID-30', ''],
      ['PID-31', 'N'],
      ['PID-33', ''],
      ['PV1-29', ''],
      ['PV1-44', ''],
      ['PV1-45', '202611251030+0100'],
    ]);
    expect(message.get('PV1-45.2')).toBe('M');
    expect(message.get('PV1-2')).toBe('O');
  });

  it('a backslash the RIS did not escape, on both sides of a component separator: the ORU names the patient as the order was read', async () => {
    // A RIS that writes the escape character as text (`MUELLER\^HANS\`): read field first,
    // then escapes (v2.5.1 §2.7), the order is family `MUELLER\`, given `HANS\`. Before, the
    // ORU paired the two backslashes across the `^` as one escape sequence and wrote
    // `MUELLER\E\\S\HANS\E\`: one family name `MUELLER\^HANS\`, no given name.
    const id = await cancelledOverHl7('PID|||PAT-RV-BS^^^HOSP^MR||MUELLER\\^HANS\\||19640812|M');
    await published(id);
    const { rows } = await db.query<{ request: { patient: { name: unknown } } }>(
      `SELECT request FROM orders WHERE id = $1`,
      [id],
    );
    expect(rows[0]!.request.patient.name).toEqual({ family: 'MUELLER\\', given: ['HANS\\'] });
    const { message } = oruOf(id);
    expect([message.get('PID-5.1'), message.get('PID-5.2')]).toEqual(['MUELLER\\', 'HANS\\']);
  });

  it('an order whose MSH-11 processing mode is no table 0207 code: the ORU’s MSH-11 keeps the processing ID and a valid mode only', async () => {
    // MSH-11 is a PT: processing ID (table 0103) ^ processing mode (table 0207: A, I, R, T).
    // Before, the order's MSH-11 went into the ORU as it came (`P^Z&q`), a PT a RIS
    // validating the result refuses; `P^A` (archive) is kept.
    for (const [msh11, expected] of [
      ['P^Z&q', 'P'],
      ['P^A', 'P^A'],
    ] as const) {
      n += 1;
      const placer = `PLC-RV${n}-${Date.now()}`;
      const message = (control: 'NW' | 'CA') =>
        Buffer.from(
          [
            `MSH|^~\\&|RADIS1|HOSP|AIADAPTER|HOSP|20261125093000||ORM^O01|RV${n}${control}|${msh11}|2.3.1`,
            'PID|||PAT-RV-PT^^^HOSP^MR||DOE^JO||19640812|F',
            `ORC|${control}|${placer}^RADIS1||||||20261125093000`,
            `OBR|1|${placer}^RADIS1||MRKOPF^MRT Kopf^L|||||||||||||||ACC-RV${n}|||||MR`,
          ].join('\r') + '\r',
          'latin1',
        );
      expect(ackSummary(await mllp.send(message('NW'))).code).toBe('AA');
      expect(ackSummary(await mllp.send(message('CA'))).code).toBe('AA');
      const { rows } = await db.query<{ id: string }>(
        `SELECT id FROM orders WHERE placer_order_number = $1`,
        [placer],
      );
      await published(rows[0]!.id);
      expect({ msh11, sent: oruOf(rows[0]!.id).message.msh.rawField(11) }).toEqual({
        msh11,
        sent: expected,
      });
    }
  });

  it('a PID-7 that is no date (19700230, abc, 1956-04-02) is not copied into the ORU; a year (1970) is', async () => {
    // Intake answers such a PID-7 with a warning ERR and stores no birth date; the ORU's PID
    // is the order's own, and it carried the value on: a DT/DTM field holding `abc`, which a
    // RIS validating PID-7 refuses (and the whole result with it).
    for (const [pid7, expected] of [
      ['19700230', undefined],
      ['abc', undefined],
      ['1956-04-02', undefined],
      ['1970', '1970'],
      ['19560402083000', '19560402083000'],
    ] as const) {
      const id = await cancelledOverHl7(`PID|||PAT-RV-BD^^^HOSP^MR||DOE^JO||${pid7}|F`);
      await published(id);
      expect({ pid7, sent: oruOf(id).message.get('PID-7') }).toEqual({ pid7, sent: expected });
    }
  });

  /**
   * An ORM^O01 NW with `orderPid`, then an ADT^A08 for each of `a08Pids` (PID-3 PAT-RV-A08 of
   * HOSP, as the order's) or the ADT message `[event, ...segments after EVN]` given, then the
   * order's CA: the ORU of its no-result report.
   */
  async function orderUpdatedByA08s(
    orderPid: string,
    a08Pids: Array<string | [string, ...string[]]>,
    /** The PID of the cancel (after a merge, the surviving patient's). */
    cancelPid = orderPid,
  ): Promise<Hl7Message> {
    n += 1;
    const placer = `PLC-RV${n}-${Date.now()}`;
    const orm = (control: 'NW' | 'CA') =>
      Buffer.from(
        [
          `MSH|^~\\&|RADIS1|HOSP|AIADAPTER|HOSP|20261125093000||ORM^O01|RV${n}${control}|P|2.3.1`,
          control === 'NW' ? orderPid : cancelPid,
          'PV1||O|RAD^^^RADIOLOGIE',
          `ORC|${control}|${placer}^RADIS1||||||20261125093000`,
          `OBR|1|${placer}^RADIS1||MRKOPF^MRT Kopf^L|||||||||||||||ACC-RV${n}|||||MR`,
        ].join('\r') + '\r',
        'latin1',
      );
    expect(ackSummary(await mllp.send(orm('NW'))).code).toBe('AA');
    for (const [i, update] of a08Pids.entries()) {
      const [event, ...segments] =
        typeof update === 'string' ? ['A08', update, 'PV1|1|O|RAD^^^RADIOLOGIE'] : update;
      const structure = event === 'A40' ? 'ADT_A39' : 'ADT_A01';
      const adt = Buffer.from(
        [
          `MSH|^~\\&|ADT1|HOSP|AIADAPTER|HOSP|20261125091500||ADT^${event}^${structure}|ADT-RV${n}-${i}|P|2.5.1`,
          `EVN|${event}|20261125091500`,
          ...segments,
        ].join('\r') + '\r',
        'latin1',
      );
      expect(ackSummary(await mllp.send(adt)).code).toBe('AA');
    }
    expect(ackSummary(await mllp.send(orm('CA'))).code).toBe('AA');
    const { rows } = await db.query<{ id: string }>(
      `SELECT id FROM orders WHERE placer_order_number = $1`,
      [placer],
    );
    await published(rows[0]!.id);
    return oruOf(rows[0]!.id).message;
  }

  it('an ADT^A08 that corrects the birth date reaches the ORU’s PID-7; a later A08 with no valid date leaves the corrected one', async () => {
    // The RIS orders with the birth date it had (19560214, a DTM with a time); the patient
    // registry corrects it (A08, 19560412), then sends an A08 whose PID-7 is no date. Before,
    // the ORU's PID was the order's as received: PID-7 still 19560214083000, the result filed
    // by the RIS under a birth date the hospital had corrected.
    const message = await orderUpdatedByA08s(
      'PID|||PAT-RV-A08^^^HOSP^MR||DOE^JO||19560214083000^D|F',
      [
        'PID|1||PAT-RV-A08^^^HOSP^MR||DOE^JO||19560412|F',
        'PID|1||PAT-RV-A08^^^HOSP^MR||DOE^JO||19561340|F',
      ],
    );
    expect(message.segment('PID')!.rawField(7)).toBe('19560412');
    expect(message.get('PID-3.1')).toBe('PAT-RV-A08');
  });

  it('an ADT^A08 whose PID-7 is the explicit null "" deletes the birth date: none in the order, none in the ORU', async () => {
    // HL7 v2.5.1 §2.5.3: `""` in a field means "delete the value the receiver holds" (a
    // registry withdrawing a wrong birth date). Before, it was read as "not sent": the order
    // kept 1956-02-14 and the ORU still carried it.
    const message = await orderUpdatedByA08s('PID|||PAT-RV-A08^^^HOSP^MR||DOE^JO||19560214|F', [
      'PID|1||PAT-RV-A08^^^HOSP^MR||DOE^JO||""|F',
    ]);
    expect(message.segment('PID')!.rawField(7)).toBe('');
    expect(message.segment('PID')!.rawField(8)).toBe('F');
    const { rows } = await db.query<{ request: { patient: Record<string, unknown> } }>(
      `SELECT request FROM orders WHERE placer_order_number = $1`,
      [message.get('ORC-2')],
    );
    expect(rows[0]!.request.patient.birthDate).toBeUndefined();
    expect(rows[0]!.request.patient.sex).toBe('female');
  });

  it('an ADT^A08 that corrects the administrative sex reaches the ORU’s PID-8; the order’s own code stays when it is that sex', async () => {
    // Registered F by mistake, corrected to M by the registry. Before, the ORU's PID-8 was
    // still the order's F (only a free-text PID-8 was replaced).
    const corrected = await orderUpdatedByA08s('PID|||PAT-RV-A08^^^HOSP^MR||DOE^JO||19560214|F', [
      'PID|1||PAT-RV-A08^^^HOSP^MR||DOE^JO||19560214|M',
    ]);
    expect(corrected.segment('PID')!.rawField(8)).toBe('M');
    // A (ambiguous) is read as other: an A08 saying A again leaves the RIS its own code
    const same = await orderUpdatedByA08s('PID|||PAT-RV-A08^^^HOSP^MR||DOE^JO||19560214|A', [
      'PID|1||PAT-RV-A08^^^HOSP^MR||DOE^JO||19560214|A',
    ]);
    expect(same.segment('PID')!.rawField(8)).toBe('A');
  });

  it('an ADT^A08 that changes the patient’s name reaches the ORU’s PID-5; an unchanged name keeps the order’s own PID-5', async () => {
    // Married since the order (the A08 of test/fixtures/hl7/adt-a08-v251-update.hl7: a legal
    // name SCHMIDT-BERGER, the birth name SCHMIDT). Before, the ORU named her SCHMIDT, the
    // name the hospital had replaced.
    const renamed = await orderUpdatedByA08s(
      'PID|||PAT-RV-A08^^^HOSP^MR||SCHMIDT^ANNA^MARIA^^DR||19560214|F',
      [
        'PID|1||PAT-RV-A08^^^HOSP^MR||SCHMIDT-BERGER^ANNA^MARIA^^DR^^L~SCHMIDT^ANNA^MARIA^^^^B||19560214|F',
      ],
    );
    expect(renamed.segment('PID')!.rawField(5)).toBe('SCHMIDT-BERGER^ANNA^MARIA^^DR');
    const same = await orderUpdatedByA08s(
      'PID|||PAT-RV-A08^^^HOSP^MR||SCHMIDT-BERGER^ANNA^MARIA^^DR^^L~SCHMIDT^ANNA^^^^^B||19560214|F',
      ['PID|1||PAT-RV-A08^^^HOSP^MR||SCHMIDT-BERGER^ANNA^MARIA^^DR^^L||19560214|F'],
    );
    expect(same.segment('PID')!.rawField(5)).toBe(
      'SCHMIDT-BERGER^ANNA^MARIA^^DR^^L~SCHMIDT^ANNA^^^^^B',
    );
  });

  it('a renamed patient whose name parts are longer than XPN holds: the ORU’s PID-5 keeps each part within its component (FN.1 50, given 30), the order keeps the whole name, and the cut is recorded with the attempt', async () => {
    // Long but real enough to be taken (domain/text-bounds.ts: 1,000 a part). Before, both went
    // into the ORU's PID-5 whole.
    const family = `SCHMIDT-${'VONDERHEIDE-'.repeat(24)}ENDE`.slice(0, 300);
    const given = 'ANNA-MARIA-KATHARINA-ELISABETH-LUISE';
    const renamed = await orderUpdatedByA08s(
      'PID|||PAT-RV-XPN^^^HOSP^MR||SCHMIDT^ANNA||19560214|F',
      [`PID|1||PAT-RV-XPN^^^HOSP^MR||${family}^${given}^^^^^L||19560214|F`],
    );
    expect(renamed.get('PID-5.1')).toBe(family.slice(0, 50));
    expect(renamed.get('PID-5.2')).toBe(given.slice(0, 30));
    const { rows } = await db.query<{
      family: string;
      quirks: Array<{ code: string; detail: string }>;
    }>(
      `SELECT o.request->'patient'->'name'->>'family' AS family, e.detail->'quirks' AS quirks
         FROM orders o JOIN audit_events e ON e.order_id = o.id
        WHERE o.request->'patient'->'identifiers'->0->>'value' = 'PAT-RV-XPN'
          AND e.kind = 'outbound.attempt' AND e.detail->>'documentKind' = 'hl7-oru'`,
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]!.family).toBe(family);
    expect(rows[0]!.quirks).toEqual([
      {
        code: 'value-cut-to-type',
        detail:
          'PID-5.1 (family name): 300 characters, written as its first 50 (FN.1 surname, ST 50); the order keeps the whole name',
      },
      {
        code: 'value-cut-to-type',
        detail:
          'PID-5.2 (given name): 36 characters, written as its first 30 (XPN.2, ST 30); the order keeps the whole name',
      },
    ]);
  });

  it('an order whose own PID-5 parts are longer than XPN holds (no rename): the echoed PID-5 keeps each part within its component, its other repetition and name type kept, and the cut recorded', async () => {
    // The intake takes a 300-character family name whole (domain/text-bounds.ts). Before, an
    // unchanged name was echoed as the order wrote it: FN.1 of 300 in the ORU, past the 50 the
    // renamed case is held to.
    const family = `MEYER-${'LUEDENSCHEIDT-'.repeat(22)}ENDE`.slice(0, 300);
    const given = 'ANNA-MARIA-KATHARINA-ELISABETH-LUISE';
    const id = await cancelledOverHl7(
      `PID|||PAT-RV-XPN2^^^HOSP^MR||${family}&VAN^${given}^^^^^L~MEYER^ANNA^^^^^B||19560214|F`,
    );
    await published(id);
    const { message } = oruOf(id);
    expect(message.get('PID-5.1.1')).toBe(family.slice(0, 50));
    expect(message.get('PID-5.1.2')).toBe('VAN');
    expect(message.get('PID-5.2')).toBe(given.slice(0, 30));
    expect(message.get('PID-5.7')).toBe('L');
    expect(message.segment('PID')!.rawField(5).split('~')[1]).toBe('MEYER^ANNA^^^^^B');
    const { rows } = await db.query<{ quirks: Array<{ code: string; detail: string }> }>(
      `SELECT e.detail->'quirks' AS quirks FROM audit_events e
        WHERE e.order_id = $1 AND e.kind = 'outbound.attempt' AND e.detail->>'documentKind' = 'hl7-oru'`,
      [id],
    );
    expect(rows[0]!.quirks).toEqual([
      {
        code: 'value-cut-to-type',
        detail:
          'PID-5.1 (family name): 300 characters, written as its first 50 (FN.1 surname, ST 50); the order keeps the whole name',
      },
      {
        code: 'value-cut-to-type',
        detail:
          'PID-5.2 (given name): 36 characters, written as its first 30 (XPN.2, ST 30); the order keeps the whole name',
      },
    ]);
  });

  it('a procedure text longer than CE.2 holds (300 characters): the ORU’s OBR-4.2 is its first 199, the code whole, the order keeps the whole text, and the cut is recorded with the attempt', async () => {
    const text =
      `MRT Kopf nativ und mit Kontrastmittel, ${'Protokoll Epilepsie, '.repeat(20)}`.slice(0, 300);
    const orderId = await cancelledOverHl7(
      'PID|||PAT-RV-OBR4^^^HOSP^MR||DOE^JOHN||19700101|M',
      `MRKOPF^${text}^L`,
    );
    await published(orderId);
    const { message } = oruOf(orderId);
    expect(message.get('OBR-4.1')).toBe('MRKOPF');
    expect(message.get('OBR-4.2')).toBe(text.slice(0, 199).trimEnd());
    const { rows } = await db.query<{ display: string; quirks: unknown }>(
      `SELECT o.request->'procedure'->>'display' AS display, e.detail->'quirks' AS quirks
         FROM orders o JOIN audit_events e ON e.order_id = o.id
        WHERE o.id = $1 AND e.kind = 'outbound.attempt' AND e.detail->>'documentKind' = 'hl7-oru'`,
      [orderId],
    );
    expect(rows).toEqual([
      {
        display: text,
        quirks: [
          {
            code: 'value-cut-to-type',
            detail:
              'OBR-4.2 (procedure text): 300 characters, written as its first 199 (CE.2/CWE.2, ST 199); the order keeps the whole text',
          },
        ],
      },
    ]);
  });

  it('an ADT^A40 that merges the order’s patient into another: the ORU names the surviving patient in PID-3', async () => {
    // The registry merges duplicate record PAT-RV-A40-OLD into PAT-RV-A40 while the order is
    // open; intake moves the order to the surviving patient. Before, the ORU's PID-3 was the
    // order's as received, PAT-RV-A40-OLD: a result filed under a record that no longer exists.
    const message = await orderUpdatedByA08s(
      'PID|||PAT-RV-A40-OLD^^^HOSP^MR||DOE^JO||19560214|F',
      [['A40', 'PID|1||PAT-RV-A40^^^HOSP^MR||DOE^JO||19560214|F', 'MRG|PAT-RV-A40-OLD^^^HOSP^MR']],
      'PID|||PAT-RV-A40^^^HOSP^MR||DOE^JO||19560214|F',
    );
    expect(message.getAll('PID-3.1')).toEqual(['PAT-RV-A40']);
    expect(message.get('PID-3.4')).toBe('HOSP');
    expect(message.get('PID-3.5')).toBe('MR');
  });

  it('a no-result DiagnosticReport keeps R4 dom-3: no contained resource that nothing references', async () => {
    const id = await cancelledOverHl7('PID|||PAT-RV-D3^^^HOSP^MR||DOE^JO||19640812|F');
    await published(id);
    const dr = await reportOf(id);
    expect(dr).toMatchObject({ status: 'cancelled' });
    // before: the AI Device contained and referenced from nowhere (only measurements name it,
    // and a cancelled report has none); a server evaluating dom-3 refuses the report
    expect(containedIssues(dr!)).toEqual([]);
    expect(dr!.contained).toBeUndefined();
    // the Task still names the Device, as its owner
    const [task] = await ehr.search<Task>('Task', `identifier=urn:imaging-ai-adapter:order|${id}`);
    expect(task!.owner).toMatchObject({ reference: '#ai-device' });
    expect(containedIssues(task!)).toEqual([]);
  });

  /**
   * The RIS cancels its order (ORC-1 CA, v2.5.1 4.5.1.1) before it was placed upstream: the
   * no-result ORU answers the request, ORC-1 CR "canceled as requested" (table 0119), as the
   * CANCELLED row does for an order cancelled upstream at the orderer's request.
   */
  it('an order its RIS cancelled before it was placed: the ORU says CR (as requested), not OC', async () => {
    // NW and CA in one message: sent one after the other, a fast job worker placed the order
    // between them once in a final CI (row CANCELLED, as an upstream cancel is)
    const id = await cancelledOverHl7(
      'PID|||PAT-RV-CR^^^HOSP^MR||DOE^JO||19640812|F',
      undefined,
      undefined,
      undefined,
      true,
    );
    await published(id);
    const { message } = oruOf(id);
    // before: OC, a cancel of the filler's own
    expect([message.get('ORC-1'), message.get('ORC-5'), message.get('OBR-25')]).toEqual([
      'CR',
      'CA',
      'X',
    ]);
    const { rows } = await db.query<{ row: string; control: string }>(
      `SELECT payload->>'rowKey' AS row, payload->'row'->'hl7'->>'orderControl' AS control
         FROM outbox WHERE order_id = $1 AND kind = 'hl7-oru'`,
      [id],
    );
    expect(rows).toEqual([{ row: 'ENDED_LOCALLY_CANCELLED', control: 'CR' }]);
  });

  /** The ORU as the RIS read its bytes: decoded by the MSH-18 it names. */
  function oruBytesOf(orderId: string): { bytes: Buffer; message: Hl7Message } {
    const bytes = ris.receivedBytes.find((b) => b.includes(`${orderId}^IMAGING-AI-ADAPTER`));
    expect(bytes).toBeDefined();
    return { bytes: bytes!, message: parseHl7(bytes!) };
  }

  /**
   * MSH-18 `GB 18030-2000` (HL7 table 0211, the national standard a Chinese HIS or RIS writes its
   * messages in; the name is the v2.5.1 §2.15.9.18 example of a multi-byte charset), the patient
   * 王小明 in GB 18030 bytes: the order is read, and the ORU's bytes are what its MSH-18 says.
   */
  it('an order in GB 18030: the ORU says UTF-8 in MSH-18 for its UTF-8 bytes, and the RIS reads the same name', async () => {
    const id = await cancelledOverHl7('PID|||PAT-RV-GB^^^HOSP^MR||王^小明||19640812|M', undefined, {
      msh18: 'GB 18030-2000',
      encode: (text) => iconv.encode(text, 'gb18030'),
    });
    await published(id);
    const { message } = oruBytesOf(id);
    // before: MSH-18 GB 18030-2000 over UTF-8 bytes (no GB 18030 encoder here): read as GB 18030,
    // the name was other characters
    expect(message.msh.value(18)).toBe('UNICODE'); // v2.3.1 table 0211
    expect(message.get('PID-5.1')).toBe('王');
    expect(message.get('PID-5.2')).toBe('小明');
  });

  /**
   * A Japanese RIS (JAHIS: MSH-18 `~ISO IR87`, ASCII by default and JIS X 0208 in ISO 2022
   * escape sequences, written as bytes): the ORU holds the kanji name in UTF-8 and says so, no
   * ESC, no U+FFFD, and the DiagnosticReport names the same patient.
   */
  it('an order in ISO-2022-JP bytes under ~ISO IR87: the ORU is UTF-8 and says so, the report names 服部 美咲', async () => {
    const JIS: Record<string, string> = { 服部: 'I~It', 美咲: 'H~:i' };
    const id = await cancelledOverHl7(
      'PID|||PAT-RV-JP^^^HOSP^MR||服部^美咲^^^^^L^I~HATTORI^MISAKI^^^^^L^P||19640812|F',
      undefined,
      {
        msh18: '~ISO IR87',
        encode: (text) =>
          Buffer.from(
            text.replace(/[\u3000-\u9fff]+/g, (run) => `\u001b$B${JIS[run]}\u001b(B`),
            'latin1',
          ),
      },
      '2.5',
    );
    await published(id);
    const { bytes, message } = oruBytesOf(id);
    expect(message.msh.value(18)).toBe('UNICODE UTF-8');
    expect(bytes.includes(0x1b)).toBe(false);
    expect(bytes.includes(Buffer.from('服部^美咲', 'utf8'))).toBe(true);
    expect(message.get('PID-5.1')).toBe('服部');
    const report = await reportOf(id);
    expect(JSON.stringify(report)).not.toMatch(/\\u001b|\ufffd|\$B/);
  });

  /**
   * MSH-18 `ASCII` over UTF-8 bytes (an engine that fills MSH-18 with the table's default while
   * its feed carries UTF-8; read at intake as the `declared-ascii-non-ascii` quirk).
   */
  it('an order saying ASCII with a name in UTF-8: the ORU is UTF-8 and says so, no 8-bit byte under ASCII', async () => {
    const id = await cancelledOverHl7(
      'PID|||PAT-RV-AS^^^HOSP^MR||Müller^Jörg||19640812|M',
      undefined,
      {
        msh18: 'ASCII',
        encode: (text) => Buffer.from(text, 'utf8'),
      },
    );
    await published(id);
    const { bytes, message } = oruBytesOf(id);
    // before: MSH-18 ASCII with the name in Latin-1 bytes (0xFC), neither ASCII nor the sender's
    expect(message.msh.value(18)).toBe('UNICODE'); // v2.3.1 table 0211
    expect(bytes.includes(Buffer.from('Müller^Jörg', 'utf8'))).toBe(true);
    expect(message.get('PID-5.1')).toBe('Müller');
  });

  it('an ORU in UTF-8 names it with the table 0211 value of its version: UNICODE before v2.5, UNICODE UTF-8 from v2.5', async () => {
    // `UNICODE UTF-8` entered table 0211 in v2.5; v2.3.1 and v2.4 have `UNICODE` (ISO 10646).
    // Before: a v2.3.1 RIS got MSH-18 UNICODE UTF-8, a value its version does not have, and a
    // RIS validating MSH-18 against its table refused the result.
    for (const [version, msh18] of [
      ['2.3.1', 'UNICODE'],
      ['2.4', 'UNICODE'],
      ['2.5.1', 'UNICODE UTF-8'],
    ] as const) {
      const id = await cancelledOverHl7(
        'PID|||PAT-RV-UC^^^HOSP^MR||Müller^Jörg||19640812|M',
        undefined,
        { msh18: 'ASCII', encode: (text) => Buffer.from(text, 'utf8') },
        version,
      );
      await published(id);
      const { bytes, message } = oruBytesOf(id);
      expect({ version, msh18: message.msh.value(18) }).toEqual({ version, msh18 });
      expect(bytes.includes(Buffer.from('Müller^Jörg', 'utf8'))).toBe(true);
    }
  });

  it('an order naming its charset as engines spell it (`UTF-8`, `ISO_IR 100`): the ORU names it as table 0211 does', async () => {
    // MSH-18 is an ID of table 0211. Before, the ORU wrote the order's spelling back (`UTF-8`,
    // `ISO_IR 100`), a value a RIS validating MSH-18 against the table refuses.
    for (const [msh18, encoding, written] of [
      ['UTF-8', 'utf8', 'UNICODE UTF-8'],
      ['ISO_IR 100', 'latin1', '8859/1'],
    ] as const) {
      const id = await cancelledOverHl7(
        'PID|||PAT-RV-SP^^^HOSP^MR||Müller^Jörg||19640812|M',
        undefined,
        { msh18, encode: (text) => Buffer.from(text, encoding) },
        '2.5.1',
      );
      await published(id);
      const { bytes, message } = oruBytesOf(id);
      expect({ msh18, written: message.msh.value(18) }).toEqual({ msh18, written });
      expect(bytes.includes(Buffer.from('Müller^Jörg', encoding))).toBe(true);
    }
  });

  it('an ASCII order of ASCII text keeps MSH-18 ASCII', async () => {
    const id = await cancelledOverHl7(
      'PID|||PAT-RV-AO^^^HOSP^MR||M\\XFC\\LLER^JO||19640812|M',
      undefined,
      {
        msh18: 'ASCII',
        encode: (text) => Buffer.from(text, 'latin1'),
      },
    );
    await published(id);
    const { bytes, message } = oruBytesOf(id);
    expect(message.msh.value(18)).toBe('ASCII');
    expect(bytes.every((b) => b < 0x80)).toBe(true);
  });

  it('a UTF-8 order whose name is Latin-1 hex data (`M\\XDC\\LLER`, a RIS escape an engine kept): the UTF-8 ORU writes MÜLLER in UTF-8, not the byte DC no UTF-8 reader can decode', async () => {
    // Intake reads \XDC\ in a UTF-8 message as ISO 8859-1 (quirk hex-data-not-utf8). Before,
    // the ORU (MSH-18 UNICODE, the order's charset) echoed the PID as sent: `M\XDC\LLER`, a lone
    // byte DC that a RIS decoding hexadecimal data in UTF-8 reads as U+FFFD (M�LLER).
    const id = await cancelledOverHl7(
      'PID|||PAT-RV-HX^^^HOSP^MR||M\\XDC\\LLER^J\\XDC\\RGEN||19640812|M',
      undefined,
      { msh18: 'UNICODE UTF-8', encode: (text) => Buffer.from(text, 'utf8') },
      '2.4',
    );
    await published(id);
    const { bytes, message } = oruBytesOf(id);
    expect(message.msh.value(18)).toBe('UNICODE');
    expect(bytes.includes(Buffer.from('MÜLLER^JÜRGEN', 'utf8'))).toBe(true);
    expect(bytes.toString('latin1')).not.toContain('\\XDC\\');
    expect(message.quirks).not.toContainEqual(
      expect.objectContaining({ code: 'hex-data-not-utf8' }),
    );
    // FHIR and DICOM are built from the stored order, read as the intake read it
    const order = await db.query(`SELECT request FROM orders WHERE id = $1`, [id]);
    expect(order.rows[0].request.patient.name).toMatchObject({
      family: 'MÜLLER',
      given: ['JÜRGEN'],
    });
  });

  it.each([
    // a leap second: valid R4, an Invalid Date in JavaScript (OBR-7 was 0NaNNaNNaNNaNNaNNaN+0000)
    ['2026-12-31T23:59:60Z', '20261231235959+0000'],
    // a partial dateTime (OBR-7 was 20261101000000+0000, a midnight nobody ordered)
    ['2026-11', '202611'],
    // UTC of it is +010000-01-01T11:00:00.000Z: the DiagnosticReport was refused and dead-lettered
    ['9999-12-31T23:00:00-12:00', '99991231230000-1200'],
    // UTC of it is in year 0000, no R4 year: the same
    ['0001-01-01T00:30:00+01:00', '00010101003000+0100'],
  ])(
    'a ServiceRequest occurring %s: DiagnosticReport.effectiveDateTime as sent, OBR-7 %s',
    async (occurrence, obr7) => {
      n += 1;
      const sr = {
        resourceType: 'ServiceRequest',
        status: 'active',
        intent: 'original-order',
        contained: [
          {
            resourceType: 'Patient',
            id: 'p1',
            identifier: [{ system: 'urn:oid:2.16.840.1.113883.3.999.2', value: `PAT-RV-F${n}` }],
            name: [{ family: 'Doe', given: ['Jo'] }],
          },
        ],
        identifier: [
          {
            type: {
              coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'PLAC' }],
            },
            system: 'urn:oid:2.16.840.1.113883.3.999.1',
            value: `FP-RV${n}-${Date.now()}`,
          },
        ],
        code: { coding: [{ system: 'http://loinc.org', code: '24627-2' }], text: 'Chest CT' },
        subject: { reference: '#p1' },
        occurrenceDateTime: occurrence,
      };
      const id = await revokedOverFhir(sr);
      expect(await published(id)).toEqual(
        expect.not.arrayContaining([expect.objectContaining({ status: 'dead' })]),
      );
      expect((await reportOf(id))?.effectiveDateTime).toBe(occurrence);
      expect(oruOf(id).message.get('OBR-7')).toBe(obr7);
    },
  );

  it('a FHIR order whose names and procedure text hold line breaks and tabs (R4 strings may): the ORU writes each as one line, no hexadecimal control characters in an ST', async () => {
    // XPN and CE.2/CWE.2 components are ST: printable text on one line (v2.5.1 2A.2.74), as
    // ORC-16 and OBX-3.2 are written (oneLine). Before, PID-5 went out as
    // `Smith\X0A\Jones^A\X09\B`, OBR-4.2 as `CT\X0A\Chest`: a RIS decoding the hexadecimal
    // data gets a line break inside the family name.
    n += 1;
    const id = await revokedOverFhir({
      resourceType: 'ServiceRequest',
      status: 'active',
      intent: 'original-order',
      contained: [
        {
          resourceType: 'Patient',
          id: 'p1',
          identifier: [{ system: 'urn:oid:2.16.840.1.113883.3.999.2', value: `PAT-RV-NL${n}` }],
          name: [{ family: 'Smith\nJones', given: ['Ann\tMarie', 'Lou\r\n'], suffix: ['Jr\n'] }],
        },
      ],
      identifier: [
        {
          type: {
            coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'PLAC' }],
          },
          system: 'urn:oid:2.16.840.1.113883.3.999.1',
          value: `FP-RV${n}-${Date.now()}`,
        },
      ],
      code: { coding: [{ system: 'http://loinc.org', code: '24627-2', display: 'CT\nChest' }] },
      subject: { reference: '#p1' },
    } as never);
    await published(id);
    const { text, message } = oruOf(id);
    const segments = text.split('\r').filter((s) => /^(PID|OBR)\|/.test(s));
    expect(segments.join('\r')).not.toMatch(/\\X0[9AD]/);
    expect([1, 2, 3, 4].map((c) => message.get(`PID-5.${c}`))).toEqual([
      'Smith Jones',
      'Ann Marie',
      'Lou',
      'Jr',
    ]);
    expect(message.get('OBR-4.2')).toBe('CT Chest');
  });

  it('a FHIR order in the ORU: OBR-4.3 a table 0396 code, identifier systems as HD universal IDs', async () => {
    n += 1;
    const placer = `FP-RV${n}-${Date.now()}`;
    const id = await revokedOverFhir({
      resourceType: 'ServiceRequest',
      status: 'active',
      intent: 'original-order',
      contained: [
        {
          resourceType: 'Patient',
          id: 'p1',
          identifier: [
            {
              type: {
                coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'MR' }],
              },
              system: 'http://hospital.smarthealthit.org',
              value: `PAT-RV-S${n}`,
            },
          ],
          name: [{ family: 'Doe', given: ['Jo'] }],
        },
      ],
      identifier: [
        {
          type: {
            coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'PLAC' }],
          },
          system: 'urn:oid:2.16.840.1.113883.3.999.1',
          value: placer,
        },
      ],
      code: {
        coding: [{ system: 'http://loinc.org', code: '24627-2', display: 'CT Chest' }],
      },
      subject: { reference: '#p1' },
    } as never);
    await published(id);
    const { message } = oruOf(id);
    // OBR-4.3 / CWE-3 is an ID of table 0396 (it held http://loinc.org)
    expect(message.get('OBR-4.1')).toBe('24627-2');
    expect(message.get('OBR-4.3')).toBe('LN');
    // CX-4 and EI-2..4 are HDs: a URI or OID is the universal ID, with its table 0301 type
    expect(message.get('PID-3.1')).toBe(`PAT-RV-S${n}`);
    expect(message.get('PID-3.4.1')).toBeUndefined();
    expect(message.get('PID-3.4.2')).toBe('http://hospital.smarthealthit.org');
    expect(message.get('PID-3.4.3')).toBe('URI');
    for (const f of ['ORC-2', 'OBR-2']) {
      expect(message.get(`${f}.1`)).toBe(placer);
      expect(message.get(`${f}.2`)).toBeUndefined();
      expect(message.get(`${f}.3`)).toBe('2.16.840.1.113883.3.999.1');
      expect(message.get(`${f}.4`)).toBe('ISO');
    }
  });

  it('an order with no time at all: OBR-7 (required in a result) is the time the order came, as the report says', async () => {
    n += 1;
    const id = await revokedOverFhir({
      resourceType: 'ServiceRequest',
      status: 'active',
      intent: 'original-order',
      contained: [
        {
          resourceType: 'Patient',
          id: 'p1',
          identifier: [{ system: 'urn:oid:2.16.840.1.113883.3.999.2', value: `PAT-RV-T${n}` }],
        },
      ],
      identifier: [
        { system: 'urn:oid:2.16.840.1.113883.3.999.1', value: `FP-RV${n}-${Date.now()}` },
      ],
      code: { coding: [{ system: 'http://loinc.org', code: '24627-2' }] },
      subject: { reference: '#p1' },
    } as never);
    await published(id);
    const effective = (await reportOf(id))?.effectiveDateTime;
    expect(effective).toBeDefined();
    // the same instant: 2026-11-25T16:31:02.123Z is 20261125163102+0000
    const obr7 = oruOf(id).message.get('OBR-7');
    expect(obr7).toBe(effective!.replace(/[-:T]/g, '').replace(/\.\d+/, '').replace('Z', '+0000'));
  });

  /**
   * The v2.8 EHR order set of test/fixtures/hl7/omi-o23-v28-multi-order.hl7 (MSH-2 `^~\&#`,
   * MSH-3 an HD with OID), its patient living at `Apt #4F` (written `Apt \P\4F`, the v2.7
   * truncation character escaped), PID-8 free text, placer numbers with their OID, cancelled:
   * the ORU each order's no-result report goes out as, as the RIS peer received it.
   */
  it('a v2.8 order set with a truncation character, OIDs and free-text sex: the ORU the RIS gets', async () => {
    const text = (control: 'NW' | 'CA', id: string) =>
      Buffer.from(
        withControlId(hl7Fixture('omi-o23-v28-multi-order'), id)
          .toString('latin1')
          .replace('Apt 4F', 'Apt \\P\\4F')
          .replace('|19710305|M|', '|19710305|male|')
          .replace(/(55607[12])\^EPC\|/g, '$1^EPC^1.2.840.114350.1.13.99.2^ISO|')
          .replace(/ORC\|NW\|/g, `ORC|${control}|`)
          // procedures this site's configuration maps to a product
          .replace(/24725-4\^CT Head\^LN|24590-2\^MR Brain\^LN/g, 'MRKOPF^MRT Kopf^L'),
        'latin1',
      );
    const nw = ackSummary(await mllp.send(text('NW', 'RV-V28-NW')));
    expect(nw).toEqual(expect.objectContaining({ code: 'CA' }));
    const { rows } = await db.query<{ id: string; placer_order_number: string }>(
      `SELECT id, placer_order_number FROM orders WHERE placer_order_number IN ('556071', '556072')`,
    );
    expect(rows).toHaveLength(2);
    expect(ackSummary(await mllp.send(text('CA', 'RV-V28-CA'))).code).toBe('CA');
    for (const order of rows) {
      await published(order.id);
      const { message } = oruOf(order.id);
      // MSH-5/6: the sender's MSH-3/4 whole
      expect(message.msh.rawField(5)).toBe('EPIC^1.2.840.114350.1.13.99^ISO');
      // PID as the order had it, its \P\ meaning # under our MSH-2 (which has no truncation character)
      expect(message.delimiters.truncation).toBeUndefined();
      expect(message.get('PID-11.2')).toBe('Apt #4F');
      expect(message.segment('PID')!.rawField(3)).toBe(
        'E4410029^^^EPI^MR~100000219^^^&2.16.840.1.113883.4.1&ISO^SS~QX77120^^^NYS_MEDICAID^MA',
      );
      expect(message.get('PID-8')).toBe('M');
      const placer = `${order.placer_order_number}^EPC^1.2.840.114350.1.13.99.2^ISO`;
      expect(message.segment('ORC')!.rawField(2)).toBe(placer);
      expect(message.segment('OBR')!.rawField(2)).toBe(placer);
    }
  });
});
