import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { DiagnosticReport, Task } from '@medplum/fhirtypes';
import { Client as PgClient } from 'pg';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { chestCtRequest, fhirFixture, type Json } from '../helpers/fhir-fixtures';
import { orderDiagnostics, SANDBOX_CLIENT, waitFor } from '../e2e/e2e-support';
import { startValidatingEhr, type TestEhr } from '../outbound/outbound-peers';

jest.setTimeout(120_000);

/** A second sender of the same site (its own token: its own orders). */
const OTHER_SENDER = 'other-sender-token-0123456789abcdef';

/**
 * `ServiceRequest.replaces` (R4 servicerequest.html#replaces) through the running adapter:
 * jobs on, the in-process sandbox upstream, the EHR a real FHIR engine that also receives the
 * Task and DiagnosticReport, PostgreSQL. Before, a replacing request only carried the quirk
 * `fhir-replaces-not-honoured`: both orders ran, two analyses for one clinical request.
 */
describe('a request that replaces an earlier one (ServiceRequest.replaces)', () => {
  let ehr: TestEhr;
  let adapter: TestAdapter;
  let db: PgClient;
  let outside: Server;
  let outsideHits = 0;
  let outsideUrl: string;

  beforeAll(async () => {
    ehr = await startValidatingEhr();
    await ehr.inner.seed(fhirFixture('r4-patient-example-dicom') as never);
    await ehr.inner.seed({
      resourceType: 'Patient',
      id: 'other',
      identifier: [{ system: 'http://nema.org/examples/patients', value: 'OTHER-4711' }],
      name: [{ family: 'Other', given: ['Patient'] }],
      gender: 'female',
    } as never);
    // a server outside the EHR's base: a reference to it must never be followed
    outside = createServer((_req, res) => {
      outsideHits += 1;
      res.writeHead(404);
      res.end();
    });
    await new Promise<void>((r) => outside.listen(0, '127.0.0.1', r));
    outsideUrl = `http://127.0.0.1:${(outside.address() as AddressInfo).port}/fhir`;
    adapter = await startTestAdapter({
      FHIR_SERVER_URL: ehr.baseUrl,
      OUTBOUND_POLL_MS: '50',
      API_TOKENS: [
        `sender:${TEST_TOKENS.sender}`,
        `sender:${OTHER_SENDER}`,
        `analyst:${TEST_TOKENS.analyst}`,
        `admin:${TEST_TOKENS.admin}`,
      ].join(','),
      // the EHR's channel (its notifications take over a request another sender POSTed; with
      // it unset, any sender token notifies and takes over only what it POSTed itself)
      FHIR_SUBSCRIPTION_TOKEN: TEST_TOKENS.sender,
    });
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
    await ehr?.close();
    await new Promise<void>((r) => outside?.close(() => r()));
  });

  async function post(body: Json, token: string = TEST_TOKENS.sender) {
    const res = await fetch(`${adapter.httpUrl}/fhir/ServiceRequest`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/fhir+json' },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Json };
  }

  async function order(id: string) {
    const { rows } = await db.query<{
      state: string;
      upstream_order_id: string | null;
      upstream_status: string | null;
      cancel_requested_at: Date | null;
    }>(
      `SELECT state, upstream_order_id, upstream_status, cancel_requested_at FROM orders WHERE id = $1`,
      [id],
    );
    return rows[0]!;
  }

  async function events(id: string, kind: string) {
    const { rows } = await db.query<{
      severity: string;
      summary: string;
      detail: Record<string, unknown>;
      inbound_message_id: string | null;
    }>(
      `SELECT severity, summary, detail, inbound_message_id FROM audit_events WHERE order_id = $1 AND kind = $2 ORDER BY id`,
      [id, kind],
    );
    return rows;
  }

  /**
   * The chest CT request with an accession too: the order waits for its study (pushed, as no
   * PACS is configured) instead of failing as unusable.
   */
  let accessions = 0;
  const withAccession = (placer: string, changes: Json = {}) => {
    accessions += 1;
    const sr = chestCtRequest(placer, changes);
    const acsn = {
      type: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'ACSN' }] },
      system: 'urn:oid:2.16.840.1.113883.3.999.2',
      value: `RPLACC${accessions}`,
    };
    return { ...sr, identifier: [...(sr.identifier as Json[]), acsn] };
  };

  async function created(placer: string, changes: Json = {}, token?: string): Promise<string> {
    const res = await post(withAccession(placer, changes), token);
    expect(res.status).toBe(201);
    return res.body.id as string;
  }

  const placed = (id: string) =>
    waitFor(
      `order ${id} placed upstream`,
      async () => (await order(id)).upstream_order_id !== null,
      60_000,
      200,
      () => orderDiagnostics(db, id),
    );

  it('the replaced order, placed upstream, is cancelled there as a revoke would; the Task and report say cancelled; both timelines say which replaced which', async () => {
    const old = await created('RPL-OLD-1');
    await placed(old);
    const newer = await created('RPL-NEW-1', {
      replaces: [{ reference: `ServiceRequest/${old}` }],
    });

    await waitFor(
      'the replaced order cancelled upstream',
      async () => (await order(old)).state === 'cancelled',
      60_000,
      200,
      () => orderDiagnostics(db, old),
    );
    expect(await order(old)).toMatchObject({ upstream_status: 'CANCELLED' });
    // the new order runs on
    expect((await order(newer)).state).not.toBe('cancelled');
    expect((await order(newer)).cancel_requested_at).toBeNull();

    const [replaced] = await events(old, 'order.replaced');
    expect(replaced).toMatchObject({
      severity: 'info',
      summary: `replaced by order ${newer} of the same orderer: cancel requested`,
      detail: {
        outcome: 'cancel',
        element: 'ServiceRequest.replaces[0]',
        named: `ServiceRequest/${old}`,
        replaced: old,
        replacedBy: newer,
      },
    });
    const [replaces] = await events(newer, 'order.replaces');
    expect(replaces).toMatchObject({
      severity: 'info',
      summary: `replaces order ${old}: its cancel was requested`,
    });
    // one message did both
    expect(replaces!.inbound_message_id).toBe(replaced!.inbound_message_id);
    expect(await events(old, 'order.cancel-requested')).toHaveLength(1);

    // what the clinician reads in the EHR: the replaced order's Task and report cancelled
    const [task, report] = await waitFor(
      'the Task and DiagnosticReport of the replaced order',
      async () => {
        const t = await ehr.search<Task>('Task', `identifier=urn:imaging-ai-adapter:order|${old}`);
        const r = await ehr.search<DiagnosticReport>(
          'DiagnosticReport',
          `identifier=urn:imaging-ai-adapter:diagnostic-report|${old}`,
        );
        return t[0]?.status === 'cancelled' && r[0] ? ([t[0], r[0]] as const) : undefined;
      },
    );
    expect(task.status).toBe('cancelled');
    expect(report.status).toBe('cancelled');
    // ... and that it was replaced, not called off: "the order was cancelled" alone read as if
    // the analysis was not wanted any more, and a clinician could order it again
    const replacedText =
      'the order was replaced by a newer one from the orderer and cancelled; no result will come for this one; see the replacing order';
    expect(task.statusReason?.text).toBe(replacedText);
    expect(report.conclusion).toBe(
      'The order was replaced by a newer one from the orderer and cancelled; no result will come for this one; see the replacing order.',
    );
    // the Task we serve says the same
    const servedTask = (await (
      await fetch(`${adapter.httpUrl}/fhir/Task/${old}`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.sender}` },
      })
    ).json()) as Task;
    expect(servedTask).toMatchObject({ status: 'cancelled', statusReason: { text: replacedText } });
    // The EHR then revokes the old request itself (as R4 expects of it): its order is
    // cancelled already, which is what the revoke asks. Answered 409 "can no longer be
    // cancelled", the EHR took its revoke for failed.
    const served = (await (
      await fetch(`${adapter.httpUrl}/fhir/ServiceRequest/${old}`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.sender}` },
      })
    ).json()) as Json;
    const revoke = await fetch(`${adapter.httpUrl}/fhir/ServiceRequest/${old}`, {
      method: 'PUT',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
      },
      body: JSON.stringify({ ...served, meta: undefined, status: 'revoked' }),
    });
    expect(revoke.status).toBe(200);
    expect(((await revoke.json()) as Json).status).toBe('revoked');
    expect((await order(old)).state).toBe('cancelled');
    const [late] = await events(old, 'order.cancel-refused');
    expect(late).toMatchObject({
      severity: 'info',
      summary: 'cancel not needed: the order is already cancelled',
    });
    // nothing of the new order is cancelled on the EHR
    const newTasks = await ehr.search<Task>(
      'Task',
      `identifier=urn:imaging-ai-adapter:order|${newer}`,
    );
    expect(newTasks.every((t) => t.status !== 'cancelled')).toBe(true);
  });

  it('named by its placer identifier, the sender’s open order is replaced too', async () => {
    const old = await created('RPL-OLD-2');
    const newer = await created('RPL-NEW-2', {
      replaces: [
        {
          type: 'ServiceRequest',
          identifier: { system: 'urn:oid:2.16.840.1.113883.3.999.1', value: 'RPL-OLD-2' },
        },
      ],
    });
    await waitFor('the replaced order ended', async () => (await order(old)).state === 'cancelled');
    const [replaces] = await events(newer, 'order.replaces');
    expect(replaces!.detail).toMatchObject({
      outcome: 'cancel',
      named: 'identifier (system urn:oid:2.16.840.1.113883.3.999.1)',
    });
    // no placer number (PHI) in the timeline
    expect(JSON.stringify(replaces)).not.toContain('RPL-OLD-2');

    // a conditional reference (R4 http.html#trules) by the placer identifier: the same
    const old3 = await created('RPL-OLD-3');
    const newer3 = await created('RPL-NEW-3', {
      replaces: [
        { reference: 'ServiceRequest?identifier=urn:oid:2.16.840.1.113883.3.999.1|RPL-OLD-3' },
      ],
    });
    await waitFor('the third order ended', async () => (await order(old3)).state === 'cancelled');
    const all = await db.query(
      `SELECT summary, detail FROM audit_events WHERE order_id = ANY($1::uuid[]) AND kind IN ('order.replaces', 'order.replaced')`,
      [[old3, newer3]],
    );
    expect(all.rows).toHaveLength(2);
    expect(JSON.stringify(all.rows)).not.toContain('RPL-OLD-3');
  });

  it('named by an accession number two requested procedures share, no order is replaced: an accession is no request’s own identifier', async () => {
    // One accession covers a CT chest and a CT abdomen of one visit (two ServiceRequests, each
    // with its placer number). A request replacing "the request under accession X" cancelled
    // whichever of the two was newest, and the other ran.
    const accession = {
      type: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'ACSN' }] },
      system: 'urn:oid:2.16.840.1.113883.3.999.2',
      value: 'RPL-SHARED-ACC',
    };
    const shared = (placer: string) => {
      const sr = chestCtRequest(placer);
      return { ...sr, identifier: [...(sr.identifier as Json[]), accession] };
    };
    const chest = await post(shared('RPL-SHARED-CHEST'));
    const abdomen = await post(shared('RPL-SHARED-ABDOMEN'));
    expect([chest.status, abdomen.status]).toEqual([201, 201]);
    const newer = await created('RPL-SHARED-NEW', {
      replaces: [
        {
          type: 'ServiceRequest',
          identifier: { system: accession.system, value: accession.value },
        },
      ],
    });
    for (const id of [chest.body.id as string, abdomen.body.id as string]) {
      expect((await order(id)).cancel_requested_at).toBeNull();
      expect(await events(id, 'order.replaced')).toHaveLength(0);
    }
    expect((await events(newer, 'order.replaces'))[0]).toMatchObject({
      severity: 'warning',
      detail: { outcome: 'not-held' },
    });
  });

  it('a Bundle entry and a change (PUT) that add `replaces` replace the same way', async () => {
    const old = await created('RPL-OLD-BUNDLE');
    const res = await fetch(`${adapter.httpUrl}/fhir`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
      },
      body: JSON.stringify({
        resourceType: 'Bundle',
        type: 'batch',
        entry: [
          {
            resource: withAccession('RPL-NEW-BUNDLE', {
              replaces: [{ reference: `ServiceRequest/${old}` }],
            }),
            request: { method: 'POST', url: 'ServiceRequest' },
          },
        ],
      }),
    });
    expect(res.status).toBe(200);
    await waitFor(
      'the order a Bundle replaced ended',
      async () => (await order(old)).state === 'cancelled',
    );
    expect((await events(old, 'order.replaced'))[0]!.detail).toMatchObject({
      outcome: 'cancel',
      element: 'Bundle.entry[0].resource.replaces[0]',
    });

    const old2 = await created('RPL-OLD-PUT');
    const res2 = await post(withAccession('RPL-NEW-PUT'));
    expect(res2.status).toBe(201);
    const newer = res2.body.id as string;
    const served = (await (
      await fetch(`${adapter.httpUrl}/fhir/ServiceRequest/${newer}`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.sender}` },
      })
    ).json()) as Json;
    const putWith = (replaces: Json[]) =>
      fetch(`${adapter.httpUrl}/fhir/ServiceRequest/${newer}`, {
        method: 'PUT',
        headers: {
          authorization: `Bearer ${TEST_TOKENS.sender}`,
          'content-type': 'application/fhir+json',
        },
        body: JSON.stringify({ ...served, meta: undefined, replaces }),
      });
    expect((await putWith([{ reference: `ServiceRequest/${old2}` }])).status).toBe(200);
    await waitFor(
      'the order a change replaced ended',
      async () => (await order(old2)).state === 'cancelled',
    );
    expect((await order(newer)).state).not.toBe('cancelled');
    // a PUT naming its own order as replaced changes nothing of it
    expect((await putWith([{ reference: `ServiceRequest/${newer}` }])).status).toBe(200);
    expect((await order(newer)).cancel_requested_at).toBeNull();
    expect((await events(newer, 'order.replaces')).map((e) => e.detail.outcome)).toEqual([
      'cancel',
      'self',
    ]);
  });

  it.each([
    [
      'a request no order is held for',
      () => ({ reference: 'ServiceRequest/not-held-here' }),
      'not-held',
    ],
    [
      'a URL outside the EHR base',
      () => ({ reference: `${outsideUrl}/ServiceRequest/abc` }),
      'outside-base',
    ],
    [
      'a URL that climbs out of the EHR base',
      () => ({ reference: `${ehr.baseUrl}/../elsewhere/ServiceRequest/abc` }),
      'outside-base',
    ],
    ['another resource type', () => ({ reference: 'Task/abc' }), 'not-a-service-request'],
  ])(
    'naming %s: the new order is taken (201), nothing is cancelled or fetched, and its timeline says why',
    async (_what, replaces, outcome) => {
      const hits = outsideHits;
      const newer = await created(`RPL-UNMATCHED-${outcome}-${Date.now()}`, {
        replaces: [replaces()],
      });
      const [event] = await events(newer, 'order.replaces');
      expect(event).toMatchObject({ severity: 'warning', detail: { outcome } });
      expect(event!.summary).toMatch(/nothing cancelled/);
      expect(outsideHits).toBe(hits);
      expect(await events(newer, 'order.replaced')).toHaveLength(0);
    },
  );

  it('an order already delivered is not touched: its result stands, both timelines say so', async () => {
    const old = await created('RPL-OLD-DELIVERED');
    await placed(old);
    await db.query(`UPDATE orders SET state = 'delivered' WHERE id = $1`, [old]);
    const newer = await created('RPL-NEW-DELIVERED', {
      replaces: [{ reference: `ServiceRequest/${old}` }],
    });
    expect((await order(old)).state).toBe('delivered');
    expect((await order(old)).cancel_requested_at).toBeNull();
    expect((await events(newer, 'order.replaces'))[0]).toMatchObject({
      severity: 'info',
      summary: `replaces order ${old}, already delivered: nothing to cancel, its outcome stands`,
    });
    expect((await events(old, 'order.replaced'))[0]).toMatchObject({
      detail: { outcome: 'ended', replacedBy: newer },
    });
  });

  it('a request naming more than 20 replaced: the first 20 are read, the rest are named in one warning on the new order, never dropped without a trace', async () => {
    // An EHR consolidating a series of orders into one: 20 it no longer holds, and the 21st an
    // open order of ours. Only the first 20 were read: the 21st ran beside the new order, and
    // no timeline said that anything was left unread.
    const old = await created('RPL-OLD-21ST');
    const unread = await created('RPL-OLD-22ND');
    const replaces = [
      ...Array.from({ length: 20 }, (_, i) => ({ reference: `ServiceRequest/gone-${i}` })),
      { reference: `ServiceRequest/${old}` },
      { reference: `ServiceRequest/${unread}` },
    ];
    const newer = await created('RPL-NEW-MANY', { replaces });
    const timeline = await events(newer, 'order.replaces');
    expect(timeline).toHaveLength(21);
    expect(timeline.slice(0, 20).every((e) => e.detail.outcome === 'not-held')).toBe(true);
    expect(timeline[20]).toMatchObject({
      severity: 'warning',
      detail: {
        outcome: 'not-read',
        element: 'ServiceRequest.replaces[20]',
        named: 'replaces[20] to replaces[21] (2 of 22; the first 20 are read)',
      },
    });
    expect(timeline[20]!.summary).toMatch(/not looked at.*nothing of them was cancelled/);
    // not cancelled (not read): the analyst is told to check them
    expect((await order(old)).cancel_requested_at).toBeNull();
    expect((await order(unread)).cancel_requested_at).toBeNull();
  });

  it("another sender's order is never cancelled by this sender's request", async () => {
    const theirs = await created('RPL-THEIRS', {}, OTHER_SENDER);
    const newer = await created('RPL-MINE', {
      replaces: [{ reference: `ServiceRequest/${theirs}` }],
    });
    const after = await order(theirs);
    expect(after.cancel_requested_at).toBeNull();
    expect(after.state).not.toBe('cancelled');
    expect((await events(newer, 'order.replaces'))[0]).toMatchObject({
      severity: 'warning',
      detail: { outcome: 'other-sender' },
    });
    expect((await events(theirs, 'order.replaced'))[0]).toMatchObject({
      severity: 'warning',
      detail: { outcome: 'other-sender', replacedBy: newer },
    });
  });

  it('an order of another patient is not cancelled: the link is wrong, both timelines warn', async () => {
    const old = await created('RPL-OLD-PATIENT');
    const newer = await created('RPL-NEW-PATIENT', {
      subject: { reference: 'Patient/other' },
      replaces: [{ reference: `ServiceRequest/${old}` }],
    });
    expect((await order(old)).cancel_requested_at).toBeNull();
    expect((await events(newer, 'order.replaces'))[0]).toMatchObject({
      severity: 'warning',
      detail: { outcome: 'other-patient' },
    });
    expect((await events(old, 'order.replaced'))[0]).toMatchObject({
      severity: 'warning',
      detail: { outcome: 'other-patient' },
    });
  });

  it('a request the EHR notifies that replaces an earlier one of the EHR (relative to its base) cancels that order', async () => {
    const put = async (id: string, changes: Json = {}) => {
      const res = await fetch(
        `${adapter.httpUrl}/fhir/subscription-notifications/ServiceRequest/${id}`,
        {
          method: 'PUT',
          headers: {
            authorization: `Bearer ${TEST_TOKENS.sender}`,
            'content-type': 'application/fhir+json',
          },
          body: JSON.stringify({
            ...withAccession(id.toUpperCase(), { subject: { reference: 'Patient/dicom' } }),
            id,
            meta: { versionId: '1' },
            ...changes,
          }),
        },
      );
      expect(res.status).toBe(200);
    };
    const orderOf = async (id: string) => {
      const { rows } = await db.query<{ order_id: string }>(
        `SELECT order_id FROM fhir_resources WHERE source_url = $1`,
        [`${ehr.baseUrl}/ServiceRequest/${id}`],
      );
      return rows[0]?.order_id;
    };
    await put('ehr-old-1');
    const old = (await orderOf('ehr-old-1'))!;
    expect(old).toBeDefined();
    await put('ehr-new-1', { replaces: [{ reference: 'ServiceRequest/ehr-old-1' }] });
    const newer = (await orderOf('ehr-new-1'))!;
    await waitFor('the EHR order replaced', async () => (await order(old)).state === 'cancelled');
    expect((await events(newer, 'order.replaces'))[0]).toMatchObject({
      detail: { outcome: 'cancel', named: 'ServiceRequest/ehr-old-1', replaced: old },
    });
    // an absolute URL within the EHR base names the same request
    await put('ehr-old-2');
    const old2 = (await orderOf('ehr-old-2'))!;
    await put('ehr-new-2', {
      replaces: [{ reference: `${ehr.baseUrl}/ServiceRequest/ehr-old-2/_history/1` }],
    });
    await waitFor(
      'the second EHR order replaced',
      async () => (await order(old2)).state === 'cancelled',
    );
  });

  it('a request the EHR notifies that replaces one first POSTed by another sender and then notified by the EHR cancels that order, by URL or by placer identifier', async () => {
    // Epic-style: the EHR's interface POSTs the order over REST (its own sender token), and
    // the EHR's Subscription then notifies the same request (matched by its placer number).
    // The EHR revokes that order by notification; its `replaces` was "another sender's":
    // not cancelled, and both orders ran.
    const notify = async (id: string, body: Json) => {
      const res = await fetch(
        `${adapter.httpUrl}/fhir/subscription-notifications/ServiceRequest/${id}`,
        {
          method: 'PUT',
          headers: {
            authorization: `Bearer ${TEST_TOKENS.sender}`,
            'content-type': 'application/fhir+json',
          },
          body: JSON.stringify({ ...body, id, meta: { versionId: '1' } }),
        },
      );
      expect(res.status).toBe(200);
    };
    const cases = [
      [
        'ehr-posted-old-1',
        'ehr-posted-new-1',
        (_old: Json) => ({ reference: 'ServiceRequest/ehr-posted-old-1' }),
      ],
      [
        'ehr-posted-old-2',
        'ehr-posted-new-2',
        (old: Json) => ({ identifier: (old.identifier as Json[])[0] }),
      ],
    ] as const;
    for (const [oldId, newId, replaces] of cases) {
      const first = withAccession(oldId.toUpperCase(), { subject: { reference: 'Patient/dicom' } });
      const old = await created(
        oldId.toUpperCase(),
        { subject: { reference: 'Patient/dicom' } },
        OTHER_SENDER,
      );
      await notify(oldId, { ...first, identifier: (first.identifier as Json[]).slice(0, 1) });
      // the notified request is that order (matched by its placer number), not a second one
      const { rows } = await db.query<{ order_id: string }>(
        `SELECT order_id FROM fhir_resources WHERE source_url = $1`,
        [`${ehr.baseUrl}/ServiceRequest/${oldId}`],
      );
      expect(rows.map((r) => r.order_id)).toEqual([old]);

      await notify(newId, {
        ...withAccession(newId.toUpperCase(), { subject: { reference: 'Patient/dicom' } }),
        replaces: [replaces(first)],
      });
      await waitFor(
        `the order ${oldId} replaced`,
        async () => (await order(old)).state === 'cancelled',
        60_000,
        200,
        () => orderDiagnostics(db, old),
      );
      expect((await events(old, 'order.replaced'))[0]).toMatchObject({
        severity: 'info',
        detail: { outcome: 'cancel', replaced: old },
      });
    }
  });
});

/**
 * The replaced order not placed upstream (its create failed: the upstream is unreachable): it
 * ends here, cancelled, as a revoke of it would; the EHR reads its Task cancelled with the
 * local-end code.
 */
describe('a request that replaces an order not yet placed upstream', () => {
  let ehr: TestEhr;
  let adapter: TestAdapter;
  let db: PgClient;
  let deadUpstream: Server;

  beforeAll(async () => {
    ehr = await startValidatingEhr();
    await ehr.inner.seed(fhirFixture('r4-patient-example-dicom') as never);
    // an upstream that takes connections and drops them: every create fails
    deadUpstream = createServer((req) => req.socket.destroy());
    await new Promise<void>((r) => deadUpstream.listen(0, '127.0.0.1', r));
    adapter = await startTestAdapter({
      FHIR_SERVER_URL: ehr.baseUrl,
      OUTBOUND_POLL_MS: '50',
      IMAGING_BASE_URL: `http://127.0.0.1:${(deadUpstream.address() as AddressInfo).port}/v1`,
      ...SANDBOX_CLIENT,
    });
    db = new PgClient({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
    await ehr?.close();
    deadUpstream?.closeAllConnections();
    await new Promise<void>((r) => deadUpstream?.close(() => r()));
  });

  async function post(body: Json) {
    const res = await fetch(`${adapter.httpUrl}/fhir/ServiceRequest`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
      },
      body: JSON.stringify(body),
    });
    expect(res.status).toBe(201);
    return ((await res.json()) as Json).id as string;
  }
  const state = async (id: string) =>
    (
      await db.query<{
        state: string;
        upstream_order_id: string | null;
        place_attempted_at: Date | null;
      }>(`SELECT state, upstream_order_id, place_attempted_at FROM orders WHERE id = $1`, [id])
    ).rows[0]!;

  it('ends it here, cancelled; its Task says cancelled with the local-end code, the new order goes on', async () => {
    const old = await post(chestCtRequest('RPL-UNPLACED-OLD'));
    await waitFor(
      'a create tried and failed',
      async () => (await state(old)).place_attempted_at !== null,
      60_000,
      200,
      () => orderDiagnostics(db, old),
    );
    expect((await state(old)).upstream_order_id).toBeNull();
    const newer = await post(
      chestCtRequest('RPL-UNPLACED-NEW', { replaces: [{ reference: `ServiceRequest/${old}` }] }),
    );
    await waitFor(
      'the unplaced order ended here',
      async () => (await state(old)).state === 'cancelled',
      60_000,
      200,
      () => orderDiagnostics(db, old),
    );
    expect((await state(newer)).state).toBe('received');
    const task = await waitFor('its Task in the EHR', async () => {
      const t = await ehr.search<Task>('Task', `identifier=urn:imaging-ai-adapter:order|${old}`);
      return t[0]?.status === 'cancelled' ? t[0] : undefined;
    });
    expect(task.businessStatus?.coding?.[0]).toMatchObject({
      system: 'urn:imaging-ai-adapter:local-end',
      code: 'ENDED_LOCALLY_CANCELLED',
    });
    // ended here, it says it was replaced too (it said "cancelled as the orderer asked")
    expect(task.statusReason?.text).toMatch(
      /^the order was replaced by a newer one from the orderer/,
    );
    const report = await waitFor('its DiagnosticReport in the EHR', async () => {
      const r = await ehr.search<DiagnosticReport>(
        'DiagnosticReport',
        `identifier=urn:imaging-ai-adapter:diagnostic-report|${old}`,
      );
      return r[0];
    });
    expect(report.status).toBe('cancelled');
  });
});
