import type { Client as PgClient } from 'pg';
import { type TestAdapter } from '../helpers/adapter';
import { startFhirHarness, type FhirHarness } from '../helpers/fhir-harness';
import { chestCtRequestWithIdentifiers, postFhir, type Json } from '../helpers/fhir-fixtures';

jest.setTimeout(120_000);

/**
 * A conditional create (R4 http.html#ccreate) is answered by the search it names, over the
 * ServiceRequests this sender made: one match is 200 with it, several are 412. The requests
 * below carry the identifiers RIS-driven and HL7v2-to-FHIR-converted orders carry: the
 * accession (ACSN) of the Imaging ServiceRequest IG example, a filler number, no placer
 * number. A real FHIR engine plays the EHR, PostgreSQL stores.
 */
const ACC_SYSTEM = 'urn:oid:2.16.840.1.113883.3.999.2.1';

const withIdentifiers = chestCtRequestWithIdentifiers;

/** POST /fhir/ServiceRequest, conditional when `ifNoneExist` is given. */
const post = (adapter: TestAdapter, body: Json, ifNoneExist?: string) =>
  postFhir(
    adapter,
    '/fhir/ServiceRequest',
    body,
    ifNoneExist ? { 'if-none-exist': ifNoneExist } : {},
  );

describe('FHIR conditional create: the If-None-Exist search over the orders held', () => {
  let adapter: TestAdapter;
  let db: PgClient;
  let harness: FhirHarness | undefined;
  beforeAll(async () => {
    harness = await startFhirHarness();
    ({ adapter, db } = harness);
  });
  afterAll(() => harness?.close());

  const ordersUnder = async (accession: string) =>
    (
      await db.query<{ id: string }>(
        `SELECT id FROM orders WHERE request->>'accessionNumber' = $1 ORDER BY created_at`,
        [accession],
      )
    ).rows.map((r) => r.id);

  it('a request known by its accession alone, sent again as a conditional create on it: 200 with the order made, not a second one', async () => {
    // The exam as the RIS made it (accession, no placer number), then the sender's retry
    // after a lost answer, as a conditional create naming that accession.
    const exam = withIdentifiers([['ACSN', ACC_SYSTEM, 'CC-ACC-1']]);
    const first = await post(adapter, exam);
    expect(first.status).toBe(201);
    const retry = await post(adapter, exam, `identifier=${ACC_SYSTEM}|CC-ACC-1`);
    // was 201 with a second order: the search matched only an earlier If-None-Exist
    // naming the same identifier, or a placer number
    expect({ status: retry.status, id: retry.body.id }).toEqual({ status: 200, id: first.body.id });
    expect(await ordersUnder('CC-ACC-1')).toEqual([first.body.id]);

    // the same with a filler number (a walk-in ordered at the RIS), named with the accession (AND)
    const walkIn = withIdentifiers([
      ['FILL', 'urn:oid:2.16.840.1.113883.3.999.3', 'CC-FILL-2'],
      ['ACSN', ACC_SYSTEM, 'CC-ACC-2'],
    ]);
    const made = await post(adapter, walkIn);
    const again = await post(
      adapter,
      walkIn,
      `identifier=${ACC_SYSTEM}|CC-ACC-2&identifier=urn:oid:2.16.840.1.113883.3.999.3|CC-FILL-2`,
    );
    expect({ status: again.status, id: again.body.id }).toEqual({ status: 200, id: made.body.id });
    expect(await ordersUnder('CC-ACC-2')).toEqual([made.body.id]);
  });

  it('a conditional create whose search matches two orders (two procedures of one accession): 412 multiple-matches on If-None-Exist, nothing ordered, kept', async () => {
    const chest = withIdentifiers([
      ['PLAC', 'urn:oid:2.16.840.1.113883.3.999.1', 'CC-PLAC-3A'],
      ['ACSN', ACC_SYSTEM, 'CC-ACC-3'],
    ]);
    const abdomen = withIdentifiers([
      ['PLAC', 'urn:oid:2.16.840.1.113883.3.999.1', 'CC-PLAC-3B'],
      ['ACSN', ACC_SYSTEM, 'CC-ACC-3'],
    ]);
    expect((await post(adapter, chest)).status).toBe(201);
    expect((await post(adapter, abdomen)).status).toBe(201);
    const third = withIdentifiers([
      ['PLAC', 'urn:oid:2.16.840.1.113883.3.999.1', 'CC-PLAC-3C'],
      ['ACSN', ACC_SYSTEM, 'CC-ACC-3'],
    ]);
    const answer = await post(adapter, third, `identifier=${ACC_SYSTEM}|CC-ACC-3`);
    // was 201: a third order under the accession the sender asked to be unique
    expect(answer.status).toBe(412);
    const issue = (answer.body.issue as Array<{ code: string; expression?: string[] }>)[0];
    expect({ code: issue?.code, expression: issue?.expression }).toEqual({
      code: 'multiple-matches',
      expression: ['If-None-Exist'],
    });
    expect(await ordersUnder('CC-ACC-3')).toHaveLength(2);
    const kept = await db.query<{ outcome: string }>(
      `SELECT outcome FROM inbound_messages WHERE convert_from(raw, 'UTF8') LIKE '%CC-PLAC-3C%'`,
    );
    expect(kept.rows.map((r) => r.outcome)).toEqual(['rejected']);
  });
  it('the exact bytes of a conditional create sent again as a plain POST (no placer number): the original answer, not a second order', async () => {
    // A RIS-driven request (accession, no placer number), sent first as a conditional create
    // on its accession, then resent by an interface engine that drops the If-None-Exist
    // header on retry: the same bytes. Was 201 with a second order: the conditional create
    // was kept under its search, the plain POST under the hash of its bytes. With a filler
    // number beside the accession it was 409 ("made from other content"), for the same bytes.
    const cases: Array<[string, Json, string]> = [
      ['CC-ACC-4', withIdentifiers([['ACSN', ACC_SYSTEM, 'CC-ACC-4']]), '201'],
      [
        'CC-ACC-5',
        withIdentifiers([
          ['FILL', 'urn:oid:2.16.840.1.113883.3.999.3', 'CC-FILL-5'],
          ['ACSN', ACC_SYSTEM, 'CC-ACC-5'],
        ]),
        '409',
      ],
    ];
    for (const [accession, exam] of cases) {
      const first = await post(adapter, exam, `identifier=${ACC_SYSTEM}|${accession}`);
      expect(first.status).toBe(201);
      const resend = await post(adapter, exam);
      expect({ accession, status: resend.status, id: resend.body.id }).toEqual({
        accession,
        status: 200,
        id: first.body.id,
      });
      expect(await ordersUnder(accession)).toEqual([first.body.id]);
      const kept = await db.query<{ outcome: string }>(
        `SELECT outcome FROM inbound_messages WHERE convert_from(raw, 'UTF8') LIKE $1 ORDER BY received_at`,
        [`%${accession}%`],
      );
      expect(kept.rows.map((r) => r.outcome)).toEqual(['accepted', 'duplicate']);
    }
    // other bytes (another exam of the same accession, sent plain) are still another request
    const other = withIdentifiers([
      ['FILL', 'urn:oid:2.16.840.1.113883.3.999.3', 'CC-FILL-4B'],
      ['ACSN', ACC_SYSTEM, 'CC-ACC-4'],
    ]);
    expect((await post(adapter, other)).status).toBe(201);
  });
});
