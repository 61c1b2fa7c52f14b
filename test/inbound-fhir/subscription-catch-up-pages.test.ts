import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Client as PgClient } from 'pg';
import type { Bundle, ServiceRequest } from '@medplum/fhirtypes';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { startTestFhirServer, type TestFhirServer } from '../helpers/fhir-server';

const FIXTURES = join(__dirname, '..', 'fixtures', 'fhir');
type Json = Record<string, unknown>;

/**
 * A catch-up after missed Subscription events that finds more changed ServiceRequests than
 * one search reads (20 pages). Before, it ingested the first 20 pages, marked every missed
 * event handled and the rest were never ordered. The EHR here pages its searches as real
 * servers do (`_count`, oldest first under `_sort=_lastUpdated`, a next link per page): a
 * loopback front of the FHIR engine that serves the engine's search answer page by page.
 */
describe('Subscription catch-up over more pages than one search reads', () => {
  let engine: TestFhirServer;
  let front: Server;
  let base = '';
  let adapter: TestAdapter;
  let db: PgClient;
  const searches: string[] = [];

  beforeAll(async () => {
    engine = await startTestFhirServer();
    await engine.seed(
      JSON.parse(readFileSync(join(FIXTURES, 'r4-patient-example-dicom.json'), 'utf8')),
    );
    front = createServer((req, res) => {
      void (async () => {
        const url = new URL(req.url ?? '/', 'http://front');
        const send = (status: number, text: string) => {
          res.writeHead(status, { 'content-type': 'application/fhir+json' });
          res.end(text.replaceAll(engine.baseUrl, base));
        };
        if (req.method === 'GET' && url.pathname === '/fhir/ServiceRequest') {
          searches.push(url.search);
          const size = Number(url.searchParams.get('_count') ?? 100);
          const page = Number(url.searchParams.get('_page') ?? 0);
          const query = new URLSearchParams({ _count: '1000' });
          for (const v of url.searchParams.getAll('_lastUpdated')) query.append('_lastUpdated', v);
          const all = (await (
            await fetch(`${engine.baseUrl}/ServiceRequest?${query}`)
          ).json()) as Bundle<ServiceRequest>;
          const entries = [...(all.entry ?? [])].sort((a, b) =>
            (a.resource?.meta?.lastUpdated ?? '').localeCompare(
              b.resource?.meta?.lastUpdated ?? '',
            ),
          );
          const next = new URLSearchParams(url.searchParams);
          next.set('_page', String(page + 1));
          const more = (page + 1) * size < entries.length;
          send(
            200,
            JSON.stringify({
              resourceType: 'Bundle',
              type: 'searchset',
              link: more ? [{ relation: 'next', url: `${base}/ServiceRequest?${next}` }] : [],
              entry: entries.slice(page * size, (page + 1) * size),
            }),
          );
          return;
        }
        const answer = await fetch(
          `${engine.baseUrl}${url.pathname.replace(/^\/fhir/, '')}${url.search}`,
          {
            method: req.method,
            headers: { accept: 'application/fhir+json' },
          },
        );
        send(answer.status, await answer.text());
      })().catch((error: unknown) => {
        res.statusCode = 500;
        res.end(String(error));
      });
    });
    await new Promise<void>((r) => front.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(front.address() as AddressInfo).port}/fhir`;
    adapter = await startTestAdapter({
      FHIR_SERVER_URL: base,
      JOBS_ENABLED: 'false',
      // pages of 2: 20 pages read 40 ServiceRequests
      FHIR_CATCHUP_SEARCH: 'category=363679005&_count=2',
    });
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
    await new Promise<void>((r) => front?.close(() => r()));
    await engine?.close();
  });

  const subscription = () => `${base}/Subscription/paged`;
  function notification(name: string, eventsSinceStart?: number): Json {
    const text = readFileSync(join(FIXTURES, `${name}.json`), 'utf8')
      .replaceAll('https://example.org/fhir/Subscription/admission', subscription())
      .replaceAll('https://example.org/fhir', base);
    const bundle = JSON.parse(text) as {
      entry: Array<{ resource: { parameter: Array<{ name: string; valueString?: string }> } }>;
    };
    const since = bundle.entry[0]!.resource.parameter.find(
      (p) => p.name === 'events-since-subscription-start',
    );
    if (eventsSinceStart !== undefined) since!.valueString = String(eventsSinceStart);
    return bundle as unknown as Json;
  }
  async function notify(body: Json): Promise<number> {
    const answer = await fetch(`${adapter.httpUrl}/fhir/subscription-notifications`, {
      method: 'POST',
      headers: {
        'content-type': 'application/fhir+json',
        authorization: `Bearer ${TEST_TOKENS.sender}`,
      },
      body: JSON.stringify(body),
    });
    await answer.text();
    return answer.status;
  }
  const state = async () =>
    (
      await db.query(
        `SELECT last_event_number, catch_up_from FROM fhir_subscriptions WHERE subscription_ref = $1`,
        [subscription()],
      )
    ).rows[0] as { last_event_number: string; catch_up_from: Date | null };
  const ordered = async () =>
    Number(
      (
        await db.query(
          `SELECT count(*)::int AS n FROM orders WHERE placer_order_number LIKE 'PG-%'`,
        )
      ).rows[0].n,
    );

  it('reads 20 pages, leaves the gap open, and the next heartbeat goes on from the last one read', async () => {
    expect(await notify(notification('backport-r4-notification-handshake'))).toBe(200);
    // 45 orders placed on the EHR while its notifications never reached us
    for (let i = 1; i <= 45; i++) {
      await engine.seed<ServiceRequest>({
        resourceType: 'ServiceRequest',
        id: `pg-${i}`,
        identifier: [
          {
            type: {
              coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'PLAC' }],
            },
            system: 'http://example.org/ehr/orders',
            value: `PG-${i}`,
          },
        ],
        status: 'active',
        intent: 'original-order',
        category: [{ coding: [{ system: 'http://snomed.info/sct', code: '363679005' }] }],
        code: { coding: [{ system: 'http://loinc.org', code: '24627-2' }], text: 'Chest CT' },
        subject: { reference: 'Patient/dicom' },
        occurrenceDateTime: '2026-11-27T09:00:00+01:00',
      });
      await new Promise((r) => setTimeout(r, 2)); // distinct last-updated times
    }

    expect(await notify(notification('backport-r4-notification-heartbeat', 45))).toBe(200);
    expect(searches.filter((s) => s.includes('_page=')).length).toBe(19); // 20 pages in all
    expect(searches.at(-20)).toContain('_sort=_lastUpdated');
    expect(await ordered()).toBe(40);
    const unfinished = await state();
    expect(unfinished.last_event_number).toBe('0'); // the missed events are not handled yet
    expect(unfinished.catch_up_from).not.toBeNull();

    searches.length = 0;
    expect(await notify(notification('backport-r4-notification-heartbeat', 45))).toBe(200);
    expect(decodeURIComponent(searches[0]!)).toContain(
      `_lastUpdated=ge${unfinished.catch_up_from!.toISOString()}`,
    );
    expect(await ordered()).toBe(45);
    expect(await state()).toEqual({ last_event_number: '45', catch_up_from: null });
  });
});
