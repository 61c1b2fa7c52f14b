import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';

jest.setTimeout(90_000);

/**
 * The analyst's search by identifier (GET /api/audit/orders?accession=…&patientId=…&placer=…)
 * finds the order whatever Unicode form the analyst typed or pasted: the orders hold their
 * identifiers composed (NFC, src/domain/identifier-form.ts), and a value copied from a macOS
 * tool or a decomposing engine's log (`E` + U+0301) is the same identifier.
 */
describe('audit search: an identifier typed in NFD finds the NFC order', () => {
  let adapter: TestAdapter;
  beforeAll(async () => {
    adapter = await startTestAdapter({ JOBS_ENABLED: 'false' });
  });
  afterAll(() => adapter?.close());

  const get = async (path: string) => {
    const res = await fetch(`${adapter.httpUrl}${path}`, {
      headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
    });
    return { status: res.status, body: (await res.json()) as { items: Array<{ id: string }> } };
  };

  it('by accession, patient ID, placer and filler number', async () => {
    const nfc = (s: string) => s.normalize('NFC');
    const nfd = (s: string) => encodeURIComponent(s.normalize('NFD'));
    const [{ id }] = (await adapter.dataSource.query(
      `INSERT INTO orders (source, state, request, accession_number, patient_id, placer_order_number, filler_order_number)
       VALUES ('hl7v2', 'received', '{}'::jsonb, $1, $2, $3, $4) RETURNING id`,
      [nfc('A-ÉCHO-7'), nfc('7800-É'), nfc('DP-É-7'), nfc('RQ-É-7')],
    )) as Array<{ id: string }>;
    for (const query of [
      `accession=${nfd('A-ÉCHO-7')}`,
      `patientId=${nfd('7800-É')}`,
      `placer=${nfd('DP-É-7')}`,
      `filler=${nfd('RQ-É-7')}`,
    ]) {
      const found = await get(`/api/audit/orders?${query}`);
      // Before: 200 with no items.
      expect({ query, status: found.status, ids: found.body.items.map((o) => o.id) }).toEqual({
        query,
        status: 200,
        ids: [id],
      });
    }
  });
});
