import { mkdtempSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { MllpClient } from '../../src/hl7';
import { ackSummary } from '../helpers/hl7-fixtures';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import {
  type Hl7OrderSpec,
  newOrderSpec,
  ormMessage,
  placeWithStudy,
  studyFor,
  waitFor,
  writeSiteConfig,
} from '../e2e/e2e-support';
import { multipartRelated } from '../studies/study-test-support';
import { startAckingRis, type TestRis } from '../outbound/outbound-peers';
import { spawnAdapter, waitHealthy } from '../helpers/adapter-process';
import { freePort } from '../../src/persistence/embedded-postgres';

jest.setTimeout(180_000);

/**
 * The audit log as an integration analyst uses it when a clinician asks "where is my result?",
 * on a running adapter: a real order over MLLP with its study pushed by STOW-RS, run by the
 * in-process sandbox to a failure, whose results the RIS and the EHR refuse in words that
 * quote the patient (as real peers do). Then the searches an analyst (or a careless script)
 * sends, and what the analyst may see of the peers' answers.
 */

/** What the peers say about the patient when they refuse (a RIS ACK MSA-3, an EHR OperationOutcome). */
const RIS_REFUSAL = 'Patient SCHMIDT^ANNA born 19560214 not on file';
const EHR_REFUSAL = 'Patient Mustermann, Erika born 1964-08-12 is unknown here';
const PEER_PHI = ['SCHMIDT', '19560214', 'Mustermann', '1964-08-12'];

/** An EHR that refuses every write with 422 and an OperationOutcome quoting the patient. */
async function startRefusingEhr(): Promise<{ baseUrl: string; close(): Promise<void> }> {
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(422, { 'content-type': 'application/fhir+json' });
      res.end(
        JSON.stringify({
          resourceType: 'OperationOutcome',
          issue: [
            {
              severity: 'error',
              code: 'processing',
              diagnostics: EHR_REFUSAL,
              details: { text: EHR_REFUSAL },
              expression: ['Task.for'],
            },
          ],
        }),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/fhir`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

describe('hostile: the audit log as an analyst uses it (where is my result?)', () => {
  let ris: TestRis;
  let ehr: Awaited<ReturnType<typeof startRefusingEhr>>;
  let adapter: TestAdapter;
  let mllp: MllpClient;
  let db: Client;
  let spec: Hl7OrderSpec;
  let orderId: string;

  beforeAll(async () => {
    ris = await startAckingRis(
      () => 'AE',
      undefined,
      undefined,
      () => RIS_REFUSAL,
    );
    ehr = await startRefusingEhr();
    adapter = await startTestAdapter({
      CONFIG_FILE: writeSiteConfig(mkdtempSync(join(tmpdir(), 'audit-analyst-'))),
      RIS_MLLP_HOST: '127.0.0.1',
      RIS_MLLP_PORT: String(ris.port),
      FHIR_SERVER_URL: ehr.baseUrl,
      OUTBOUND_MAX_ATTEMPTS: '1',
      STUDY_QUIET_PERIOD_SECONDS: '1',
      POLL_INTERVAL_SECONDS: '2',
    });
    mllp = new MllpClient({ host: '127.0.0.1', port: adapter.mllpPort, responseTimeoutMs: 10_000 });
    db = new Client({ connectionString: adapter.db.url });
    await db.connect();
    spec = newOrderSpec('Bitte KI-Auswertung. sandbox-outcome: failed');
    orderId = await placeWithStudy({ adapter, mllp, db }, spec);
    // the failure goes out as an ORU to the RIS and a Task to the EHR; both refuse it
    await waitFor(
      'the ORU and the Task dead-lettered',
      async () => {
        const { rows } = await db.query<{ kinds: string[] }>(
          `SELECT array_agg(DISTINCT kind) AS kinds FROM outbox WHERE order_id = $1 AND status = 'dead'`,
          [orderId],
        );
        const kinds = rows[0]?.kinds ?? [];
        return kinds.includes('hl7-oru') && kinds.includes('fhir-task');
      },
      120_000,
      500,
    );
  });

  afterAll(async () => {
    await mllp?.close();
    await db?.end();
    await adapter?.close();
    await ris?.close();
    await ehr?.close();
  });

  const call = (path: string, token: string = TEST_TOKENS.analyst, init: RequestInit = {}) =>
    fetch(`${adapter.httpUrl}${path}`, {
      ...init,
      headers: { authorization: `Bearer ${token}`, ...(init.headers ?? {}) },
    });

  it("a peer's refusal that quotes the patient stays masked for analysts: timeline, outbound views, the Task as sent, the page; an admin's reveal shows it", async () => {
    const res = await call(`/api/audit/orders/${orderId}`);
    expect(res.status).toBe(200);
    const detail = (await res.json()) as {
      timeline: Array<{ kind: string; detail: Record<string, unknown> }>;
      outbound: Array<{ kind: string; document?: { text: string } }>;
    };
    // the analyst still sees that and how each peer refused (codes, ACK code, ERR code)
    const attempts = detail.timeline.filter((e) => e.kind === 'outbound.attempt');
    const ehrAttempt = attempts.find((e) => Array.isArray(e.detail.operationOutcome));
    const risAttempt = attempts.find((e) => e.detail.ackCode === 'AE');
    expect(ehrAttempt?.detail.operationOutcome).toEqual([
      expect.objectContaining({ severity: 'error', code: 'processing', expression: ['Task.for'] }),
    ]);
    expect(risAttempt?.detail).toMatchObject({ text: '***' });
    expect(String(risAttempt?.detail.err)).toContain('207^Application internal error^HL70357');
    // the Task names the patient by identifier (Task.for): masked like every patient reference
    const task = detail.outbound.find((o) => o.kind === 'fhir-task');
    expect(task?.document?.text).toContain('"for"');
    const text = JSON.stringify(detail);
    for (const phi of [...PEER_PHI, spec.patientId]) expect(text).not.toContain(phi);

    const page = await call(`/audit/orders/${orderId}`, TEST_TOKENS.analyst, {
      headers: { accept: 'text/html' },
    });
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain('hl7-oru');
    for (const phi of [...PEER_PHI, spec.patientId]) expect(html).not.toContain(phi);

    // nothing is lost: an admin who gives a reason sees the peers' own words
    const revealed = await call(`/api/audit/orders/${orderId}/reveal`, TEST_TOKENS.admin, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ reason: 'RIS refuses results, ticket 5521' }),
    });
    expect(revealed.status).toBe(200);
    const unmasked = JSON.stringify(await revealed.json());
    expect(unmasked).toContain(EHR_REFUSAL);
    expect(unmasked).toContain('Patient SCHMIDT');
    expect(unmasked).toContain(spec.patientId);
  });

  it('a search it cannot honour is refused with a reason, never answered with every order', async () => {
    const search = async (query: string, path = '/api/audit/orders') => {
      const res = await call(`${path}?${query}`);
      const body = (await res.json()) as { items?: unknown[]; detail?: string };
      return { status: res.status, items: body.items?.length, detail: body.detail };
    };
    // the order is found by its accession, its placer number and its full patient identifier
    for (const q of [
      `accession=${spec.accession}`,
      `placer=${encodeURIComponent(spec.placer)}`,
      `patientId=${spec.patientId}`,
    ]) {
      expect(await search(q)).toEqual({ status: 200, items: 1, detail: undefined });
    }
    // a filter given twice (a script's loop, a form with two fields of one name)
    expect(await search(`accession=${spec.accession}&accession=ACC-OTHER`)).toEqual({
      status: 400,
      items: undefined,
      detail: 'accession: give one value (it came 2 times)',
    });
    // a filter the search does not have (names are not searchable), or misspelt
    for (const q of ['patientName=SCHMIDT', `accesion=${spec.accession}`, 'accession[x]=A']) {
      const answer = await search(q);
      expect(answer.status).toBe(400);
      expect(answer.detail).toMatch(/^unknown filter .* \(the filters are orderId, /);
    }
    // NUL cannot be searched for (PostgreSQL text holds none): 400, not 500
    expect(await search('accession=ACC%00X')).toMatchObject({
      status: 400,
      detail: 'accession: must not contain a NUL character',
    });
    expect(await search('text=%00%00', '/api/audit/messages')).toMatchObject({ status: 400 });
    // the dead-letter list's page size is checked like the searches' (it was read as NaN → 50)
    expect(await search('limit=abc', '/api/audit/dead-letters')).toMatchObject({ status: 400 });
    expect(await search('limit=100000', '/api/audit/dead-letters')).toMatchObject({ status: 400 });
    // a cursor edited by hand, or taken from another list: 400, not a database cast error
    const cursor = (raw: string) => Buffer.from(raw).toString('base64url');
    for (const [path, raw] of [
      ['/api/audit/orders', '0/abc'],
      ['/api/audit/orders', `99999999999999999999/${orderId}`],
      ['/api/audit/messages', '1700000000000000/12345'],
      ['/api/audit/events', `0/${orderId}`],
      ['/api/audit/dead-letters', '0/abc'],
      // the page's snapshot (late commits, docs/audit.md) edited: one PostgreSQL cannot read
      ['/api/audit/orders', `1700000000000000/${orderId}/1700000000000000/5:3:`],
      ['/api/audit/orders', `1700000000000000/${orderId}/1700000000000000/0:0:`],
      ['/api/audit/messages', `1700000000000000/${orderId}/1700000000000000/3:5:6`],
      ['/api/audit/messages', `1700000000000000/${orderId}/1700000000000000/3:9:5,4`],
    ] as const) {
      expect(await search(`cursor=${cursor(raw)}`, path)).toMatchObject({
        status: 400,
        detail: 'cursor is not valid',
      });
    }

    // the page shows the same refusals above its form, and lists no order
    for (const q of [`accession=${spec.accession}&accession=ACC-OTHER`, 'accession=ACC%00X']) {
      const page = await call(`/audit/orders?${q}`, TEST_TOKENS.analyst, {
        headers: { accept: 'text/html' },
      });
      expect(page.status).toBe(200);
      const html = await page.text();
      expect(html).toMatch(/role="alert">accession: (give one value|must not contain)/);
      expect(html).toContain('No orders match');
    }
  });

  it("time filters are UTC unless they name an offset, whatever the server's time zone; other dates are refused", async () => {
    const { rows } = await db.query<{ created: Date }>(
      `SELECT created_at AS created FROM orders WHERE id = $1`,
      [orderId],
    );
    const created = rows[0]!.created;
    const minute = (d: Date) => d.toISOString().slice(0, 16); // 2026-11-25T10:00, no zone
    const from = minute(created);
    const to = minute(new Date(created.getTime() + 60_000));
    const berlin = (d: string) =>
      new Date(new Date(`${d}Z`).getTime() + 3_600_000).toISOString().slice(0, 16) + '+01:00';
    const found = async (query: string) => {
      const res = await call(`/api/audit/orders?accession=${spec.accession}&${query}`);
      const body = (await res.json()) as { items?: unknown[]; detail?: string };
      return { status: res.status, items: body.items?.length, detail: body.detail };
    };
    // a second replica of the adapter on this database, on a hospital server's local time
    const httpPort = await freePort();
    const berlinAdapter = spawnAdapter({
      TZ: 'Europe/Berlin',
      DATABASE_URL: adapter.db.url,
      HTTP_PORT: String(httpPort),
      HTTP_HOST: '127.0.0.1',
      MLLP_PORT: String(await freePort()),
      MLLP_HOST: '127.0.0.1',
      API_TOKENS: `analyst:${TEST_TOKENS.analyst}`,
      DATA_DIR: mkdtempSync(join(tmpdir(), 'audit-analyst-berlin-')),
      JOBS_ENABLED: 'false',
    });
    try {
      const base = `http://127.0.0.1:${httpPort}`;
      await waitHealthy(base, 60_000, berlinAdapter);
      const inBerlin = async (query: string) => {
        const res = await fetch(`${base}/api/audit/orders?accession=${spec.accession}&${query}`, {
          headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
        });
        return { status: res.status, items: ((await res.json()) as { items?: [] }).items?.length };
      };
      // the analyst types the UTC minute the order came in (the page labels its fields UTC)
      expect(await inBerlin(`from=${from}&to=${to}`)).toEqual({ status: 200, items: 1 });
      expect(await inBerlin(`from=${from.replace('T', '%20')}&to=${to}`)).toEqual({
        status: 200,
        items: 1,
      });
      // the same minute in Berlin time, saying so
      const offset = `from=${encodeURIComponent(berlin(from))}&to=${encodeURIComponent(berlin(to))}`;
      expect(await inBerlin(offset)).toEqual({ status: 200, items: 1 });
    } finally {
      berlinAdapter.child.kill('SIGTERM');
      await berlinAdapter.exited;
    }
    // what Date.parse would read as 2001 or in the server's zone is not a date here
    for (const bad of ['1', 'Nov%2025', '25.11.2026', '2026-13-01']) {
      expect(await found(`from=${bad}`)).toEqual({
        status: 400,
        items: undefined,
        detail: 'from: must be an ISO 8601 date or date-time (UTC unless it names an offset)',
      });
    }
  });

  it('a time range that ends where or before it starts is refused with why, not answered "no orders match"', async () => {
    // the analyst swapped the dates: before, 200 with an empty list, read as "not there"
    for (const path of ['/api/audit/orders', '/api/audit/events', '/api/audit/messages']) {
      for (const range of [
        'from=2026-11-29&to=2026-11-28',
        'from=2026-11-28T10:00&to=2026-11-28T10:00',
      ]) {
        const res = await call(`${path}?${range}`);
        expect({ path, range, status: res.status }).toEqual({ path, range, status: 400 });
        expect(((await res.json()) as { detail: string }).detail).toMatch(
          /^to: must be later than from \(from 2026-11-2\d[T ].* to 2026-11-28[T ].*: no time between\)$/,
        );
      }
    }
    // the page shows the same words where its list would be
    const session = await call('/audit/session', TEST_TOKENS.analyst, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'text/html' },
      body: new URLSearchParams({ token: TEST_TOKENS.analyst }).toString(),
      redirect: 'manual',
    });
    const cookie = /^(audit_session=[^;]*)/.exec(session.headers.get('set-cookie') ?? '')![1]!;
    const page = await fetch(`${adapter.httpUrl}/audit/orders?from=2026-11-29&to=2026-11-28`, {
      headers: { cookie, accept: 'text/html' },
    });
    expect(await page.text()).toContain('to: must be later than from');
    // an honest range still answers
    expect((await call('/api/audit/orders?from=2026-11-28&to=2026-11-29')).status).toBe(200);
  });

  it('a RIS that keeps resending the order buries nothing: the dead letters and the failure stay in the timeline, the cut is said', async () => {
    // the RIS did not take our result and resends its order (new MSH-10 each time), 800 times
    for (let i = 0; i < 800; i++) {
      const ack = await mllp.send(ormMessage({ ...spec, controlId: `RESEND-${i}` }));
      expect(ackSummary(ack).code).toBe('AA');
    }
    const res = await call(`/api/audit/orders/${orderId}`);
    const detail = (await res.json()) as {
      timeline: Array<{ id: string; kind: string; summary: string }>;
      timelineOmitted: number;
      lineage: unknown[];
    };
    const kinds = detail.timeline.map((e) => e.kind);
    expect(detail.timeline.length).toBeLessThanOrEqual(2000);
    expect(detail.timelineOmitted).toBeGreaterThan(0);
    // where the order is: failed, its ORU and Task dead-lettered; the resends are the newest
    expect(kinds).toContain('outbound.dead-letter');
    expect(detail.timeline.some((e) => / → failed/.test(e.summary))).toBe(true);
    const newest = (await (await call(`/api/audit/events?orderId=${orderId}&limit=1`)).json()) as {
      items: Array<{ id: string }>;
    };
    expect(detail.timeline[detail.timeline.length - 1]?.id).toBe(newest.items[0]?.id);
    expect(kinds[kinds.length - 1]).toBe('order.duplicate');
    expect(kinds.slice(0, 5)).toContain('inbound.received');
    expect(detail.lineage.length).toBeGreaterThan(0);

    const page = await call(`/audit/orders/${orderId}`, TEST_TOKENS.analyst, {
      headers: { accept: 'text/html' },
    });
    const html = await page.text();
    expect(html).toContain(`${detail.timelineOmitted} repeated events`);
    expect(html).toContain('outbound.dead-letter');
  });

  it('an order that named no Study Instance UID is found by the UID of the study it got', async () => {
    // A v2.3 RIS without ZDS (or a FHIR order without one): the study is found by its
    // accession number. The analyst asked about that study (PACS, a radiologist) searches by
    // its UID; before, the order list was empty, as if no order had taken the study.
    const other = newOrderSpec();
    const { body, contentType } = multipartRelated(studyFor(other).map((i) => ({ data: i.bytes })));
    const stow = await fetch(`${adapter.httpUrl}/dicomweb/studies`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_TOKENS.sender}`, 'content-type': contentType },
      body,
    });
    expect(stow.status).toBe(200);
    const withoutUid = Buffer.from(
      ormMessage(other)
        .toString('latin1')
        .split('\r')
        .filter((segment) => !segment.startsWith('ZDS|'))
        .join('\r'),
      'latin1',
    );
    expect(ackSummary(await mllp.send(withoutUid)).code).toBe('AA');
    const id = await waitFor('the study matched by accession', async () => {
      const { rows } = await db.query<{ order_id: string }>(
        `SELECT a.order_id FROM study_acquisitions a JOIN orders o ON o.id = a.order_id
          WHERE o.placer_order_number = $1 AND a.study_instance_uid = $2`,
        [other.placer, other.studyUid],
      );
      return rows[0]?.order_id;
    });
    const res = await call(`/api/audit/orders?studyInstanceUid=${other.studyUid}`);
    expect(res.status).toBe(200);
    const found = (await res.json()) as { items: Array<{ id: string }> };
    expect(found.items.map((o) => o.id)).toEqual([id]);
  });
});
