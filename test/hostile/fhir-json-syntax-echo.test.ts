import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';

jest.setTimeout(120_000);

const FIXTURES = join(__dirname, '..', 'fixtures', 'fhir');

/**
 * A FHIR body that is not JSON is refused with 400, and its OperationOutcome is stored as the
 * message's answer, shown to analysts. V8's JSON.parse quotes up to twenty characters of the
 * body around the fault (`Unexpected token 'S', ..."family": Shaw,"... is not valid JSON`):
 * that excerpt went into the answer, the audit log's answer text and problems, and so unmasked
 * to every analyst, the patient's name included. Now the diagnostics say what is wrong and
 * where, never the body's own characters.
 */
describe('FHIR front door: a body that is not JSON is described without its own words', () => {
  let adapter: TestAdapter;

  beforeAll(async () => {
    adapter = await startTestAdapter();
  });
  afterAll(async () => {
    await adapter?.close();
  });

  /** The US Core transaction Bundle as a template that lost its quotes would send it. */
  function brokenBundles(): Array<[string, string]> {
    const text = readFileSync(join(FIXTURES, 'us-core-chest-ct-transaction.json'), 'utf8');
    expect(text).toContain('"family": "Shaw"');
    expect(text).toContain('"birthDate": "1987-02-20"');
    return [
      // a name substituted without its quotes (an interface engine's template)
      ['unquoted name', text.replace('"family": "Shaw"', '"family": Shaw')],
      // Python's repr of a value where JSON was meant
      ['Python None', text.replace('"birthDate": "1987-02-20"', '"birthDate": None')],
      // the whole Patient sent as text, one line
      ['plain text', 'Shaw, Amy V. 1987-02-20 MRN 1032702'],
    ];
  }

  it('the OperationOutcome and the audit log name no character of the body', async () => {
    for (const [name, body] of brokenBundles()) {
      const answer = await fetch(`${adapter.httpUrl}/fhir`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TEST_TOKENS.sender}`,
          'content-type': 'application/fhir+json',
        },
        body,
      });
      const text = await answer.text();
      expect({ name, status: answer.status }).toEqual({ name, status: 400 });
      const outcome = JSON.parse(text) as {
        issue: Array<{ code: string; diagnostics: string }>;
      };
      expect(outcome.issue[0]).toMatchObject({ code: 'structure' });
      expect(outcome.issue[0]!.diagnostics).toMatch(/^not valid JSON: /);
      for (const secret of ['Shaw', 'Amy', '1987', '1032702', 'None'])
        expect({ name, secret, leaked: text.includes(secret) }).toEqual({
          name,
          secret,
          leaked: false,
        });
    }

    const listed = await fetch(`${adapter.httpUrl}/api/audit/messages?limit=10`, {
      headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
    });
    expect(listed.status).toBe(200);
    const page = (await listed.json()) as { items: Array<{ outcome: string }> };
    expect(page.items.filter((m) => m.outcome === 'rejected')).toHaveLength(3);
    const seen = JSON.stringify(page);
    for (const secret of ['Shaw', 'Amy', '1987', '1032702', 'None'])
      expect({ secret, leaked: seen.includes(secret) }).toEqual({ secret, leaked: false });
  });

  it('a fault V8 places is still named by line and column', async () => {
    const text = readFileSync(join(FIXTURES, 'us-core-chest-ct-transaction.json'), 'utf8');
    // a trailing comma after the last identifier: V8 says where
    const body = text.replace('"value": "tx-2013-0508-77"', '"value": "tx-2013-0508-77",');
    const answer = await fetch(`${adapter.httpUrl}/fhir`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
      },
      body,
    });
    expect(answer.status).toBe(400);
    const outcome = (await answer.json()) as { issue: Array<{ diagnostics: string }> };
    expect(outcome.issue[0]!.diagnostics).toMatch(/line 7 column \d+/);
  });
});
