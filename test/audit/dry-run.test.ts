import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { hl7Fixture } from '../helpers/hl7-fixtures';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;
type Role = keyof typeof TEST_TOKENS;

const FHIR = join(__dirname, '..', 'fixtures', 'fhir');
const fhirFixture = (name: string) =>
  JSON.parse(readFileSync(join(FHIR, `${name}.json`), 'utf8')) as Record<string, unknown>;

describe('POST /api/mappings/dry-run (real adapter, real PostgreSQL): answers, maps, stores nothing', () => {
  let adapter: TestAdapter;

  const dryRun = async (body: unknown, role: Role = 'analyst') => {
    const res = await fetch(`${adapter.httpUrl}/api/mappings/dry-run`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_TOKENS[role]}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? (JSON.parse(text) as Json) : undefined };
  };
  const counts = async () => {
    const [row] = await adapter.dataSource.query(
      `SELECT (SELECT count(*) FROM inbound_messages)::int AS messages,
              (SELECT count(*) FROM orders)::int AS orders,
              (SELECT count(*) FROM audit_events)::int AS events,
              (SELECT count(*) FROM job_outbox)::int AS job_outbox,
              (SELECT count(*) FROM graphile_worker._private_jobs)::int AS jobs`,
    );
    return row as Record<string, number>;
  };

  beforeAll(async () => {
    adapter = await startTestAdapter({
      JOBS_ENABLED: 'false',
      MLLP_MAX_MESSAGE_BYTES: '65536',
      HL7_MAX_SEGMENTS: '50',
    });
  });
  afterAll(async () => {
    await adapter?.close();
  });

  it('an IHE ORM^O01: AA, the OrderRequest, lineage and upstream metadata; nothing stored', async () => {
    const before = await counts();
    const text = hl7Fixture('orm-o01-v231-ihe-swf-zds').toString('latin1');
    const { status, body } = await dryRun({ hl7: text });
    expect(status).toBe(200);
    expect(body.dryRun).toBe(true);
    expect(body.answer.kind).toBe('hl7');
    expect(body.answer.code).toBe('AA');
    expect(body.answer.text).toMatch(/^MSH\|/);
    expect(body.answer.text).toMatch(/\rMSA\|AA\|/);
    expect(body.messageType).toBe('ORM^O01');
    expect(body.orders).toHaveLength(1);
    const [order] = body.orders;
    expect(order.request.action).toBe('create');
    expect(order.lineage.length).toBeGreaterThan(3);
    expect(order.lineage.some((l: Json) => l.source.startsWith('PID-3'))).toBe(true);
    expect(Object.keys(order.upstreamMetadata).length).toBeGreaterThan(0);
    expect(body.notes.join(' ')).toMatch(
      /not part of a dry run: duplicate and state checks against stored orders/i,
    );
    expect(await counts()).toEqual(before);
  });

  it('a broken message: AE/AR with ERR, no order; nothing stored', async () => {
    const before = await counts();
    const missing = await dryRun({ hl7: hl7Fixture('broken-orm-missing-pid3').toString('latin1') });
    expect(missing.status).toBe(200);
    expect(['AE', 'AR']).toContain(missing.body.answer.code);
    expect(missing.body.answer.text).toMatch(/\rERR\|/);
    expect(missing.body.orders).toEqual([]);
    const unparseable = await dryRun({ hl7: 'this is not HL7' });
    expect(unparseable.body.answer.code).toBe('AR');
    expect(unparseable.body.answer.text).toMatch(/\rMSA\|AR/);
    const unknown = await dryRun({
      hl7: hl7Fixture('orm-o01-v231-unknown-procedure').toString('latin1'),
    });
    expect(unknown.body.answer.code).toBe('AE');
    expect(unknown.body.answer.text).toMatch(/\rERR\|/);
    expect(await counts()).toEqual(before);
  });

  it('a FHIR ServiceRequest with its Patient contained: the 201 answer and the order; nothing stored', async () => {
    const before = await counts();
    const di = fhirFixture('r4-servicerequest-example-di');
    const patient = fhirFixture('r4-patient-example-dicom');
    const { status, body } = await dryRun({
      fhir: {
        ...di,
        contained: [{ ...patient, id: 'p1' }],
        identifier: [{ system: 'http://example.org/ehr/orders', value: 'DRY-1' }],
        subject: { reference: '#p1' },
        requester: { display: 'Dr. Adam Careful' },
      },
    });
    expect(status).toBe(200);
    expect(body.answer.kind).toBe('fhir');
    expect(body.answer.status).toBe(201);
    expect(body.answer.body.resourceType).toBe('ServiceRequest');
    expect(body.orders).toHaveLength(1);
    expect(body.orders[0].request.placerOrderNumber.value).toBe('DRY-1');
    expect(body.orders[0].lineage.some((l: Json) => l.source.startsWith('ServiceRequest'))).toBe(
      true,
    );
    expect(Object.keys(body.orders[0].upstreamMetadata).length).toBeGreaterThan(0);
    // an invalid one: the status and OperationOutcome we would answer
    const bad = await dryRun({ fhir: { resourceType: 'ServiceRequest', status: 'nope' } });
    expect(bad.body.answer.status).toBeGreaterThanOrEqual(400);
    expect(bad.body.answer.body.resourceType).toBe('OperationOutcome');
    expect(await counts()).toEqual(before);
  });

  it('bounds and roles: a sender gets 403, neither/both inputs 400, admin may', async () => {
    const text = hl7Fixture('orm-o01-v231-ihe-swf-zds').toString('latin1');
    expect((await dryRun({ hl7: text }, 'sender')).status).toBe(403);
    expect((await dryRun({ hl7: text }, 'admin')).status).toBe(200);
    expect((await dryRun({})).status).toBe(400);
    expect((await dryRun({ hl7: text, fhir: {} })).status).toBe(400);
  });

  it("the front doors' bounds: over MLLP_MAX_MESSAGE_BYTES → 400; over HL7_MAX_SEGMENTS → AR", async () => {
    const text = hl7Fixture('orm-o01-v231-ihe-swf-zds').toString('latin1');
    const big = await dryRun({ hl7: text + 'NTE|1||' + 'x'.repeat(70_000) });
    expect(big.status).toBe(400);
    expect(JSON.stringify(big.body)).toMatch(/MLLP_MAX_MESSAGE_BYTES/);
    // over the API's JSON body limit (1 MiB): a clear 413, not a 500 (before: "an unexpected
    // error occurred"); a charset the JSON parser cannot read: 415
    const huge = await fetch(`${adapter.httpUrl}/api/mappings/dry-run`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.analyst}`,
        'content-type': 'application/json',
      },
      body: JSON.stringify({ hl7: text + 'NTE|1||' + 'x'.repeat(1_100_000) }),
    });
    expect(huge.status).toBe(413);
    expect(huge.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(((await huge.json()) as { detail: string }).detail).toBe(
      'the request body is larger than 1048576 bytes',
    );
    const latin1 = await fetch(`${adapter.httpUrl}/api/mappings/dry-run`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.analyst}`,
        'content-type': 'application/json; charset=latin1',
      },
      body: JSON.stringify({ hl7: text }),
    });
    expect(latin1.status).toBe(415);
    expect(((await latin1.json()) as { detail: string }).detail).toBe(
      'unsupported charset "LATIN1"',
    );
    const many = await dryRun({ hl7: text + '\rNTE|1||note'.repeat(60) });
    expect(many.status).toBe(200);
    expect(many.body.answer.code).toBe('AR');
  });

  it('a FHIR transaction Bundle: the Bundle response and its orders; nothing stored', async () => {
    const before = await counts();
    const { status, body } = await dryRun({ fhir: fhirFixture('us-core-chest-ct-transaction') });
    expect(status).toBe(200);
    expect(body.answer.status).toBe(200);
    expect(body.answer.body.type).toBe('transaction-response');
    expect(body.orders.length).toBeGreaterThan(0);
    expect(body.answer.body.entry.some((e: Json) => e.response.status === '201 Created')).toBe(
      true,
    );
    expect(await counts()).toEqual(before);
  });
});
