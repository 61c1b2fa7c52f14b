import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client as PgClient } from 'pg';
import type { MllpClient } from '../../src/hl7';
import { ImagingClientError } from '../../src/imaging-client/imaging-client.error';
import { OrderPollerService } from '../../src/orders/order-poller.service';
import { TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { ackSummary } from '../helpers/hl7-fixtures';
import { startMllpHarness, type MllpHarness } from '../helpers/mllp-harness';
import {
  newOrderSpec,
  orderByPlacer,
  orderDiagnostics,
  orderState,
  ormMessage,
  placeWithStudy,
  SANDBOX_CLIENT,
  serviceRequestFor,
  waitFor,
  writeSiteConfig,
  type Hl7OrderSpec,
} from '../e2e/e2e-support';
import { startFaultyProxy, type ProxyAction } from '../imaging-client/faulty-proxy';
import {
  buildClient,
  startTestSandbox,
  type ClientUnderTest,
} from '../imaging-client/sandbox-harness';

jest.setTimeout(180_000);

/**
 * What the adapter SENDS to the Imaging Analysis Service, read back from the upstream (the
 * sandbox, which keeps what it was given) after real orders came in through the front doors:
 * each value valid for its key (docs/upstream-assumptions.md, "Order metadata keys"), and the
 * upstream's copy of the order the same as ours after every change.
 */
describe('upstream requests of a running adapter', () => {
  let sandbox: Awaited<ReturnType<typeof startTestSandbox>>;
  let harness: MllpHarness | undefined;
  let adapter: TestAdapter;
  let mllp: MllpClient;
  let db: PgClient;
  let upstream: ClientUnderTest;
  let proxy: Awaited<ReturnType<typeof startFaultyProxy>>;
  /** How the upstream answers a call (method and path), when a test wants otherwise. */
  let refuse: (method: string, path: string) => ProxyAction = () => 'pass';

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'upstream-requests-'));
    sandbox = await startTestSandbox({ host: '127.0.0.1' });
    proxy = await startFaultyProxy(sandbox.sandbox.baseUrl, (method, path) => refuse(method, path));
    harness = await startMllpHarness({
      JOBS_ENABLED: 'true',
      IMAGING_BASE_URL: proxy.baseUrl,
      ...SANDBOX_CLIENT,
      STUDY_QUIET_PERIOD_SECONDS: '1',
      CONFIG_FILE: writeSiteConfig(dir),
      POLL_INTERVAL_SECONDS: '3600',
      IMAGING_SANDBOX_OUTCOME_FROM_NOTES: 'true',
    });
    ({ adapter, mllp, db } = harness);
    upstream = buildClient(sandbox.sandbox.baseUrl);
  });
  afterAll(async () => {
    await upstream?.close();
    await harness?.close();
    await proxy?.close();
    await sandbox?.close();
  });

  /** The ORM of `spec` with its PID-7 (birth date) and PID-8 (sex) replaced. */
  const withPatient = (spec: Hl7OrderSpec, birthDate: string, sex: string) =>
    Buffer.from(
      ormMessage(spec).toString('latin1').replace('||19640812|F|', `||${birthDate}|${sex}|`),
      'latin1',
    );

  /** Sends the NW (no study yet; `message` or the usual ORM) and waits until the upstream order exists. */
  async function placed(
    spec: Hl7OrderSpec,
    message: Buffer = ormMessage(spec),
  ): Promise<{ id: string; upstreamId: string }> {
    expect(ackSummary(await mllp.send(message)).code).toBe('AA');
    const row = await waitFor(
      'the order placed upstream',
      async () => {
        const r = await orderByPlacer(db, spec.placer);
        return r?.upstream_order_id ? r : undefined;
      },
      60_000,
      200,
      async () => {
        const r = await orderByPlacer(db, spec.placer);
        return r ? orderDiagnostics(db, r.id) : 'no order';
      },
    );
    return { id: row.id, upstreamId: row.upstream_order_id! };
  }

  /** The timeline entries of an order whose summary starts with `summary`. */
  const auditCount = async (id: string, summary: string) =>
    Number(
      (
        await db.query(
          `SELECT count(*) AS n FROM audit_events WHERE order_id = $1 AND starts_with(summary, $2)`,
          [id, summary],
        )
      ).rows[0].n,
    );

  it('a change that takes a value away (XO: birth date only 1964, PID-8 empty) takes it away upstream too', async () => {
    const spec = newOrderSpec();
    const { id, upstreamId } = await placed(spec);
    const before = (await upstream.client.getMetadata({ orderId: upstreamId })).metadata;
    expect(before).toMatchObject({ patient_birth_date: '19640812', patient_sex: 'F' });

    const change = withPatient({ ...spec, orderControl: 'XO', priority: 'S' }, '1964', '');
    expect(ackSummary(await mllp.send(change)).code).toBe('AA');
    await waitFor(
      'the change sent upstream',
      async () => (await auditCount(id, 'changed metadata sent upstream')) > 0,
    );

    const after = (await upstream.client.getMetadata({ orderId: upstreamId })).metadata;
    // Before: PATCH /add-metadata carried only the keys the order still had a value for, so
    // the upstream kept 19640812 and F (a birth date and sex our order no longer states)
    // while the priority became stat; the study's values never showed through.
    expect(after.priority).toBe('stat');
    expect(after).not.toHaveProperty('patient_birth_date');
    expect(after).not.toHaveProperty('patient_sex');
    expect(after).toMatchObject({
      patient_id: spec.patientId,
      accession_number: spec.accession,
      study_uid: spec.studyUid,
      products: ['neuro-volumetry'],
    });
    // Our own key survives: a later lookup by correlation id still finds the order.
    expect(after.correlation_id).toBe(id);
  });

  /** The warnings on an order's timeline. */
  const warnings = async (id: string) =>
    (
      await db.query(
        `SELECT summary FROM audit_events WHERE order_id = $1 AND severity = 'warning' ORDER BY id`,
        [id],
      )
    ).rows.map((r: { summary: string }) => r.summary);

  it('a partial birth date (PID-7 1964) is not sent, and the timeline says so', async () => {
    const spec = newOrderSpec();
    const { id, upstreamId } = await placed(spec, withPatient(spec, '1964', 'F'));
    const sent = (await upstream.client.getMetadata({ orderId: upstreamId })).metadata;
    expect(sent).not.toHaveProperty('patient_birth_date');
    expect(sent.patient_sex).toBe('F');
    // Before: left out without a word; the analyst could not tell why the upstream's birth
    // date (from the study) differed from the order's.
    // Written with the move to placed, which `placed` waited for.
    const said = (await warnings(id)).join('\n');
    expect(said).toMatch(
      /metadata not sent upstream: patient_birth_date \(a partial date; the upstream takes YYYYMMDD only\)/,
    );
  });

  it('FHIR: a name over 1,024 characters in all, each part within its bound, is not sent (the upstream refuses the whole order for it); the order is placed', async () => {
    const spec = newOrderSpec();
    const resource = serviceRequestFor(spec) as {
      contained: Array<Record<string, unknown>>;
      code: unknown;
    };
    // The site's local RIS code (writeSiteConfig's table), as an EHR passes it through.
    resource.code = { coding: [{ code: 'MRKOPF', display: 'MRT Kopf' }] };
    // An EHR that keeps every former name in family, joined, and every given name in one: valid
    // FHIR (string up to 1 MB). Each part is within the intake's 1,000 (src/domain/text-bounds.ts;
    // a longer one is refused at the door), the name in all (1,081) is not within the upstream's 1,024.
    const family = Array.from({ length: 95 }, (_, i) => `Name${String(i).padStart(5, '0')}`).join(
      ' ',
    );
    const given = Array.from({ length: 12 }, () => 'Friederike').join('-');
    resource.contained[0]!.name = [{ family, given: [given] }];
    const res = await fetch(`${adapter.httpUrl}/fhir/ServiceRequest`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
      },
      body: JSON.stringify(resource),
    });
    expect([res.status, res.status === 201 ? '' : await res.text()]).toEqual([201, '']);
    // Before: POST /new-order carried the whole name, the upstream answered 400
    // invalid_metadata ("patient_name" is longer than 1024 characters) and the order, accepted
    // with 201, failed: "the upstream refused the order".
    const row = await waitFor(
      'the order placed upstream',
      async () => {
        const r = await orderByPlacer(db, spec.placer);
        return r?.upstream_order_id || r?.state === 'failed' ? r : undefined;
      },
      60_000,
    );
    expect(row.state).not.toBe('failed');
    const sent = (await upstream.client.getMetadata({ orderId: row.upstream_order_id! })).metadata;
    expect(sent).not.toHaveProperty('patient_name');
    expect(sent.patient_id).toBe(spec.patientId);
    const said = (await warnings(row.id)).join('\n');
    expect(said).toMatch(
      /metadata not sent upstream: patient_name \(1\d{3} characters, more than the 1024 the upstream takes\)/,
    );
    expect(said).not.toContain('Name00001');
  });

  it('a name part holding a PN delimiter (PID-5 O\\S\\BRIEN^MARY=ANN) is sent as one part, and the timeline says so', async () => {
    const spec = newOrderSpec();
    // \S\ is the escaped component separator: the family name is O^BRIEN as typed.
    const message = Buffer.from(
      ormMessage(spec)
        .toString('latin1')
        .replace('MUSTERMANN^ERIKA^^^^^L', 'O\\S\\BRIEN^MARY=ANN^^^^^L'),
      'latin1',
    );
    const { id, upstreamId } = await placed(spec, message);
    const sent = (await upstream.client.getMetadata({ orderId: upstreamId })).metadata;
    // Before: "O^BRIEN^MARY=ANN", read as family O, given BRIEN, middle MARY, and an
    // ideographic group ANN (PS3.5 6.2).
    expect(sent.patient_name).toBe('O BRIEN^MARY ANN');
    expect((await warnings(id)).join('\n')).toMatch(
      /metadata changed for the upstream: patient_name \(a \^, =, \\ or control character within a name part became a space\)/,
    );
    // The dry run shows an analyst the same before anything is sent.
    const res = await fetch(`${adapter.httpUrl}/api/mappings/dry-run`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.analyst}`,
        'content-type': 'application/json',
      },
      body: JSON.stringify({
        hl7: withPatient({ ...spec, placer: `${spec.placer}D` }, '1964', 'F')
          .toString('latin1')
          .replace('MUSTERMANN^ERIKA^^^^^L', 'O\\S\\BRIEN^MARY=ANN^^^^^L'),
      }),
    });
    const preview = (await res.json()) as {
      orders: Array<{ upstreamMetadata: Record<string, unknown>; upstreamMetadataNote?: string }>;
    };
    expect(preview.orders[0]!.upstreamMetadata.patient_name).toBe('O BRIEN^MARY ANN');
    expect(preview.orders[0]!.upstreamMetadataNote).toMatch(
      /^metadata not sent upstream: patient_birth_date \(a partial date.*; metadata changed for the upstream: patient_name/,
    );
  });

  it('the sandbox takes a birth date only as a day of the calendar (DICOM DA), as the adapter sends it', async () => {
    const create = (date: string) =>
      upstream.client
        .createOrder({ patient_birth_date: date }, { correlationId: `da-${date}` })
        .then(
          () => 'created',
          (e: unknown) => (e instanceof ImagingClientError ? e.code : String(e)),
        );
    // Before: any eight digits were taken (a month 13, a 30 February), so a test against the
    // sandbox could never show a date the real service refuses.
    expect(await create('19851345')).toBe('bad_request');
    expect(await create('19850230')).toBe('bad_request');
    expect(await create('19850000')).toBe('bad_request');
    expect(await create('20000229')).toBe('created');
    expect(await create('19640812')).toBe('created');
  });

  it.each([
    [
      404,
      'not_found',
      'unknown order',
      /cancelled here: the upstream does not know the order \(not_found on cancel-order/,
    ],
    [
      403,
      'forbidden',
      'no write permission',
      /cancelled here, but the upstream refused the cancel \(forbidden on cancel-order.*\) and may still process the order/,
    ],
  ])(
    'a cancel the upstream refuses with %i ends the order once, with the reason (never retried for hours)',
    async (status, code, message, reason) => {
      const spec = newOrderSpec();
      const { id } = await placed(spec);
      const before = proxy.hits.length;
      refuse = (method, path) =>
        path === '/cancel-order'
          ? { status, rewrite: () => JSON.stringify({ error: code, message }) }
          : 'pass';
      try {
        expect(ackSummary(await mllp.send(ormMessage({ ...spec, orderControl: 'CA' }))).code).toBe(
          'AA',
        );
        // Before: the cancel job threw the refusal, the job queue tried again (and again, up
        // to 25 times over hours, against "404: do not retry"), and the order stayed placed
        // with its cancel requested: neither cancelled nor going on.
        await waitFor(
          'the order ended',
          async () => (await orderState(db, id)) === 'cancelled',
          20_000,
          200,
          () => orderDiagnostics(db, id),
        );
        const summaries = (
          await db.query(`SELECT summary FROM audit_events WHERE order_id = $1 ORDER BY id`, [id])
        ).rows.map((r: { summary: string }) => r.summary);
        expect(summaries.join('\n')).toMatch(reason);
        // Contract, Errors: 404 and 403 are not retried; one PATCH /cancel-order in all.
        const cancels = proxy.hits.slice(before).filter((h) => h.path === '/cancel-order');
        expect(cancels).toHaveLength(1);
      } finally {
        refuse = () => 'pass';
      }
    },
  );

  it('a QC bypass reason longer than the upstream takes is refused by our API with the limit, never sent', async () => {
    const spec = newOrderSpec('sandbox-outcome: qc_failed');
    const id = await placeWithStudy({ adapter, mllp, db }, spec);
    const poller = adapter.app.get(OrderPollerService);
    await waitFor(
      'the order held by its QC rejection',
      async () => {
        await poller.runNow();
        return (await orderState(db, id)) === 'qc-hold';
      },
      60_000,
      500,
      () => orderDiagnostics(db, id),
    );
    const before = proxy.hits.length;
    const bypass = (reason: string) =>
      // an order over HL7 carries no sender token: admin acts on it through the API
      fetch(`${adapter.httpUrl}/api/orders/${id}/qc-bypass`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TEST_TOKENS.admin}`,
          'content-type': 'application/json',
        },
        body: JSON.stringify({ reason }),
      });
    // A clinician pasting the whole QC report in as the reason.
    const res = await bypass(`artefacts acceptable: ${'motion in slices 12-18; '.repeat(45)}`);
    // Before: sent as is, the upstream answered 400 invalid_parameter (at most 1000
    // characters) and the clinician got 409 "the upstream refused" for a limit we knew.
    expect(res.status).toBe(400);
    expect(await res.text()).toMatch(/reason: at most 1000 characters/);
    expect(proxy.hits.slice(before).filter((h) => h.path === '/qc-bypass')).toHaveLength(0);
    expect(await orderState(db, id)).toBe('qc-hold');
  });
});
