import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client as PgClient } from 'pg';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { startTestFhirServer, type TestFhirServer } from '../helpers/fhir-server';

const FIXTURES = join(__dirname, '..', 'fixtures', 'fhir');
const fixture = (name: string) => JSON.parse(readFileSync(join(FIXTURES, `${name}.json`), 'utf8'));

interface ServedTask {
  status: string;
  businessStatus: {
    coding?: Array<{ system: string; code: string; display?: string }>;
    text?: string;
  };
}

/**
 * GET /fhir/Task: businessStatus is a CodeableConcept with one coding of our declared systems
 * for every order state, the upstream's status only where the order's state is its doing
 * (real adapter, real PostgreSQL, the EHR a real FHIR engine).
 */
describe('served Task.businessStatus: a code of ours for every order state', () => {
  let ehr: TestFhirServer;
  let adapter: TestAdapter;
  let db: PgClient;
  let base: string;

  beforeAll(async () => {
    ehr = await startTestFhirServer();
    await ehr.seed(fixture('r4-patient-example-dicom'));
    adapter = await startTestAdapter({ FHIR_SERVER_URL: ehr.baseUrl, JOBS_ENABLED: 'false' });
    base = `${adapter.httpUrl}/fhir`;
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
    await ehr?.close();
  });

  let n = 0;
  async function orderIn(state: string, upstreamStatus: string | null): Promise<string> {
    n += 1;
    const sr = {
      ...fixture('r4-servicerequest-example-di'),
      identifier: [{ system: 'http://example.org/ehr/orders', value: `DI-BS-${n}` }],
    };
    const res = await fetch(`${base}/ServiceRequest`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
      },
      body: JSON.stringify(sr),
    });
    expect(res.status).toBe(201);
    const { id } = (await res.json()) as { id: string };
    await db.query(`UPDATE orders SET state = $2, upstream_status = $3 WHERE id = $1`, [
      id,
      state,
      upstreamStatus,
    ]);
    return id;
  }

  async function task(id: string): Promise<ServedTask> {
    const res = await fetch(`${base}/Task/${id}`, {
      headers: { authorization: `Bearer ${TEST_TOKENS.sender}` },
    });
    expect(res.status).toBe(200);
    return (await res.json()) as ServedTask;
  }

  const UPSTREAM = 'urn:imaging-ai-adapter:upstream-status';
  const LOCAL_END = 'urn:imaging-ai-adapter:local-end';
  const ORDER_STATE = 'urn:imaging-ai-adapter:order-state';

  it.each([
    // state, upstream status, Task.status, system, code
    ['received', null, 'received', ORDER_STATE, 'received'],
    ['placed', null, 'accepted', ORDER_STATE, 'placed'],
    ['placed', 'PENDING', 'accepted', UPSTREAM, 'PENDING'],
    ['study-ready', 'PENDING', 'in-progress', UPSTREAM, 'PENDING'],
    ['uploading', null, 'in-progress', ORDER_STATE, 'uploading'],
    ['processing', 'ANALYSIS_RUNNING', 'in-progress', UPSTREAM, 'ANALYSIS_RUNNING'],
    // a value the spec does not list is not shown as an upstream code
    ['processing', 'ARCHIVED_SOMEHOW', 'in-progress', ORDER_STATE, 'processing'],
    ['qc-hold', 'QC_FAILED', 'on-hold', UPSTREAM, 'QC_FAILED'],
    ['delivered', 'DELIVERED', 'completed', UPSTREAM, 'DELIVERED'],
    ['delivered', 'EXPIRED', 'failed', UPSTREAM, 'EXPIRED'],
    ['failed', 'FAILED', 'failed', UPSTREAM, 'FAILED'],
    ['failed', 'QC_FAILED', 'failed', UPSTREAM, 'QC_FAILED'],
    ['failed', 'EXPIRED', 'failed', UPSTREAM, 'EXPIRED'],
    ['cancelled', 'CANCELLED', 'cancelled', UPSTREAM, 'CANCELLED'],
    // ended here: the local-end row, as the published Task has it
    ['failed', null, 'failed', LOCAL_END, 'ENDED_LOCALLY_FAILED'],
    ['cancelled', null, 'cancelled', LOCAL_END, 'ENDED_LOCALLY_CANCELLED'],
    // the sweep ended a stuck analysis here: not "failed" beside ANALYSIS_RUNNING
    ['failed', 'ANALYSIS_RUNNING', 'failed', LOCAL_END, 'ENDED_LOCALLY_FAILED'],
    ['cancelled', 'PENDING', 'cancelled', LOCAL_END, 'ENDED_LOCALLY_CANCELLED'],
  ] as const)(
    '%s with upstream status %s: Task %s, businessStatus %s|%s',
    async (state, upstream, taskStatus, system, code) => {
      const id = await orderIn(state, upstream);
      const t = await task(id);
      expect(t.status).toBe(taskStatus);
      expect(t.businessStatus.coding).toHaveLength(1);
      expect(t.businessStatus.coding![0]).toMatchObject({ system, code });
      expect(typeof t.businessStatus.text).toBe('string');
      expect(t.businessStatus.text!.length).toBeGreaterThan(0);
      if (system !== UPSTREAM) expect(t.businessStatus.coding![0]!.display).toBeTruthy();
      // the search answers the same Task
      const res = await fetch(`${base}/Task?based-on=ServiceRequest/${id}`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.sender}` },
      });
      expect(res.status).toBe(200);
      const bundle = (await res.json()) as { entry: Array<{ resource: ServedTask }> };
      expect(bundle.entry).toHaveLength(1);
      expect(bundle.entry[0]!.resource.businessStatus).toEqual(t.businessStatus);
    },
  );

  it('an end here reads as the published Task reads it (display and text of the local-end row)', async () => {
    const t = await task(await orderIn('cancelled', null));
    expect(t.businessStatus).toEqual({
      coding: [
        {
          system: LOCAL_END,
          code: 'ENDED_LOCALLY_CANCELLED',
          display: 'Cancelled without a result (ended by the adapter)',
        },
      ],
      text: 'cancelled, no result',
    });
  });
});
