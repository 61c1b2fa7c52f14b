import type { Client as PgClient } from 'pg';
import type { TestAdapter } from '../helpers/adapter';
import { startFhirHarness, type FhirHarness } from '../helpers/fhir-harness';
import { chestCtRequest, postFhir } from '../helpers/fhir-fixtures';

jest.setTimeout(120_000);

/**
 * A requester known only by `Reference.display` (no resolvable Practitioner): its name is
 * split from the display. EHRs write it "Family, Given" (Oracle Health/Cerner: "Smart, Nancy
 * MD") or "Given Family, Credential" (Epic's sandbox clinician "Physician Family Medicine,
 * MD"); split on spaces alone, "Stern, Carl" became family "Carl", given "Stern," (comma and
 * all), and a credential became the family name ("MD"), sent on upstream as the ordering
 * provider.
 */
describe('the ordering provider split from requester.display', () => {
  let harness: FhirHarness | undefined;
  let adapter: TestAdapter;
  let db: PgClient;
  beforeAll(async () => {
    harness = await startFhirHarness();
    ({ adapter, db } = harness);
  });
  afterAll(() => harness?.close());

  it.each([
    ['Dr. Adam Careful', { prefix: 'Dr.', given: ['Adam'], family: 'Careful' }],
    ['Stern, Carl', { family: 'Stern', given: ['Carl'] }],
    ['Smart, Nancy MD', { family: 'Smart', given: ['Nancy'], suffix: 'MD' }],
    [
      'Physician Family Medicine, MD',
      { given: ['Physician', 'Family'], family: 'Medicine', suffix: 'MD' },
    ],
    ['Careful, Adam J., MD, PhD', { family: 'Careful', given: ['Adam', 'J.'], suffix: 'MD PhD' }],
  ])('%s', async (display, name) => {
    const placer = `DISP-${display.replace(/[^A-Za-z]/g, '')}`;
    const answer = await postFhir(
      adapter,
      '/fhir/ServiceRequest',
      chestCtRequest(placer, { requester: { display } }),
    );
    expect(answer.status).toBe(201);
    const { rows } = await db.query<{ provider: unknown; quirks: Array<{ code: string }> }>(
      `SELECT o.request->'orderingProvider' AS provider, m.quirks
         FROM orders o JOIN inbound_messages m ON m.id = o.inbound_message_id
        WHERE o.placer_order_number = $1`,
      [placer],
    );
    expect(rows[0]!.provider).toEqual({ name });
    expect(rows[0]!.quirks.map((q) => q.code)).toContain('fhir-requester-display-only');
  });
});
