import { PassThrough } from 'node:stream';
import type { Client as PgClient } from 'pg';
import type { TestAdapter } from '../helpers/adapter';
import { startFhirHarness, type FhirHarness } from '../helpers/fhir-harness';
import { chestCtRequest, postFhir } from '../helpers/fhir-fixtures';
import type { TestFhirServer } from '../helpers/fhir-server';

jest.setTimeout(120_000);

/**
 * The EHR refusing the adapter's own reads (401: FHIR_SERVER_TOKEN expired or rotated; 403:
 * scopes not granted), as happens at a site when a credential lapses. A required reference
 * (the subject) that cannot be read for that reason is not "not found": the order is not
 * refused for good, the sender is told to resend (503), and the answer says why.
 */
describe('EHR refusing our reads', () => {
  let ehr: TestFhirServer;
  let adapter: TestAdapter;
  let db: PgClient;
  let harness: FhirHarness | undefined;
  let logs = '';
  beforeAll(async () => {
    const sink = new PassThrough();
    sink.on('data', (chunk: Buffer) => (logs += chunk.toString('utf8')));
    harness = await startFhirHarness({}, { sink });
    ({ ehr, adapter, db } = harness);
  });
  afterAll(() => harness?.close());

  it.each([
    [401, 'a lapsed token'],
    [403, 'scopes not granted'],
  ])(
    'the subject unreadable (%s, %s): 503 saying the EHR refused our read, nothing ordered; the resend once access is back is ordered',
    async (status, _why) => {
      const placer = `EHR-REFUSED-${status}`;
      ehr.failWith = status;
      const refused = await postFhir(adapter, '/fhir/ServiceRequest', chestCtRequest(placer));
      ehr.failWith = undefined;
      // Before: 422 not-found "the EHR FHIR server does not have it"; the EHR took the order
      // as refused for good and never resent it.
      expect(refused.status).toBe(503);
      const issues = refused.body.issue as Array<{ code: string; diagnostics: string }>;
      expect(issues[0]!.code).toBe('transient');
      expect(issues[0]!.diagnostics).toMatch(new RegExp(`refused .*\\(${status}\\)`));
      expect(issues[0]!.diagnostics).toMatch(/FHIR_SERVER_TOKEN/);
      const none = await db.query(`SELECT 1 FROM orders WHERE placer_order_number = $1`, [placer]);
      expect(none.rows).toEqual([]);

      expect((await postFhir(adapter, '/fhir/ServiceRequest', chestCtRequest(placer))).status).toBe(
        201,
      );
    },
  );
  it('a conditional subject (Patient?identifier=…) the EHR will not let us search (401): 503, not 422 "not-supported"', async () => {
    // R4 http.html#trules conditional reference, the R4 DICOM example patient's identifier.
    const sr = chestCtRequest('EHR-REFUSED-SEARCH', {
      subject: { reference: 'Patient?identifier=http://nema.org/examples/patients|MINT1234' },
    });
    ehr.failWith = 401;
    const refused = await postFhir(adapter, '/fhir/ServiceRequest', sr);
    ehr.failWith = undefined;
    expect(refused.status).toBe(503);
    expect(JSON.stringify(refused.body)).toMatch(/refused the adapter's search/);
    expect((await postFhir(adapter, '/fhir/ServiceRequest', sr)).status).toBe(201);
  });
  it("a 503 because the EHR could not be read logs no patient identifier: the conditional subject's MRN and the subject's id stay in the answer", async () => {
    // The R4 DICOM example patient's identifier (MINT1234) in a conditional subject the EHR
    // will not let us search, and a subject read while the EHR is down. Before, the error log
    // line ("FHIR request failed") held the error whole: the search with the MRN, or
    // `Patient/<id>`, in its message, its stack and its issues (DESIGN §5: no PHI in logs).
    const mrn = 'MINT1234';
    const searched = chestCtRequest('EHR-REFUSED-LOG-1', {
      subject: { reference: `Patient?identifier=http://nema.org/examples/patients|${mrn}` },
    });
    const read = chestCtRequest('EHR-REFUSED-LOG-2', {
      subject: { reference: 'Patient/mint-4711-8815' },
    });
    logs = '';
    ehr.failWith = 401;
    const refusedSearch = await postFhir(adapter, '/fhir/ServiceRequest', searched);
    ehr.failWith = 503;
    const refusedRead = await postFhir(adapter, '/fhir/ServiceRequest', read);
    ehr.failWith = undefined;
    expect([refusedSearch.status, refusedRead.status]).toEqual([503, 503]);
    expect(JSON.stringify(refusedSearch.body)).toContain(mrn);
    expect(JSON.stringify(refusedRead.body)).toContain('mint-4711-8815');
    // the refusals are logged, without the patient's identifiers
    expect(logs).toMatch(/the EHR FHIR server could not be read/);
    expect(logs).not.toContain(mrn);
    expect(logs).not.toContain('mint-4711-8815');
  });
});
