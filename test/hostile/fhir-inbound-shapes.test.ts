import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Client as PgClient } from 'pg';
import { TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import type { TestFhirServer } from '../helpers/fhir-server';
import { startFhirHarness, type FhirHarness } from '../helpers/fhir-harness';
import { chestCtRequest, expressions, postFhir, type Json } from '../helpers/fhir-fixtures';

jest.setTimeout(120_000);

/**
 * FHIR inputs found answering wrongly on a running adapter (an attack-and-real-world pass):
 * each is answered with the status and the element it is about, kept for the audit log, and
 * stores only values PostgreSQL can hold. A real FHIR engine plays the EHR.
 */

/** An R4 Backport event notification (STU 1.1 shape) with these parameters and entries. */
function notification(subscription: string, events: Json[][], entries: Json[] = []): Json {
  return {
    resourceType: 'Bundle',
    type: 'history',
    timestamp: '2026-11-25T08:00:00Z',
    entry: [
      {
        fullUrl: 'urn:uuid:9e41ff6d-5be6-4e6a-8b85-abd4e7f58400',
        resource: {
          resourceType: 'Parameters',
          parameter: [
            { name: 'subscription', valueReference: { reference: subscription } },
            { name: 'topic', valueCanonical: 'http://example.org/SubscriptionTopic/imaging' },
            { name: 'status', valueCode: 'active' },
            { name: 'type', valueCode: 'event-notification' },
            ...events.map((part) => ({ name: 'notification-event', part })),
          ],
        },
        request: { method: 'GET', url: `${subscription}/$status` },
        response: { status: '200' },
      },
      ...entries,
    ],
  };
}

describe('hostile: FHIR inputs answered with the right status and element, and stored', () => {
  let ehr: TestFhirServer;
  let adapter: TestAdapter;
  let db: PgClient;

  let harness: FhirHarness | undefined;
  beforeAll(async () => {
    harness = await startFhirHarness();
    ({ ehr, adapter, db } = harness);
  });
  afterAll(() => harness?.close());

  const lastMessage = async () =>
    (
      await db.query<{ outcome: string; response_code: string; raw: Buffer; transport: string }>(
        `SELECT outcome, response_code, raw, transport FROM inbound_messages ORDER BY received_at DESC LIMIT 1`,
      )
    ).rows[0]!;
  /** The refusal kept for a request the EHR notified (its focus URL). */
  const ehrRequestRefusal = async (focus: string) => {
    const row = (
      await db.query<{ outcome: string; response_code: string; response: Buffer }>(
        `SELECT outcome, response_code, response FROM inbound_messages
          WHERE message_type = 'ServiceRequest (from the EHR)' AND message_control_id = $1`,
        [focus],
      )
    ).rows[0]!;
    return { ...row, answer: JSON.parse(row.response.toString('utf8')) as Json };
  };
  const ordersWith = async (placer: string) =>
    (await db.query(`SELECT id FROM orders WHERE placer_order_number = $1`, [placer])).rows;

  it('a create whose status is revoked or entered-in-error: 422 on ServiceRequest.status, never a 200 naming no resource', async () => {
    for (const status of ['revoked', 'entered-in-error']) {
      const placer = `NEW-${status}`;
      const res = await postFhir(
        adapter,
        '/fhir/ServiceRequest',
        chestCtRequest(placer, { status }),
      );
      expect({ status: res.status, location: res.location }).toEqual({
        status: 422,
        location: null,
      });
      expect(expressions(res.body)).toEqual(['ServiceRequest.status']);
      expect(JSON.stringify(res.body)).toMatch(/PUT its ServiceRequest/);
      expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '422' });
      expect(await ordersWith(placer)).toEqual([]);
    }
    // Same placer as a live order: a POST never cancels it (that is PUT's job).
    const created = await postFhir(adapter, '/fhir/ServiceRequest', chestCtRequest('LIVE-1'));
    expect(created.status).toBe(201);
    const again = await postFhir(
      adapter,
      '/fhir/ServiceRequest',
      chestCtRequest('LIVE-1', { status: 'revoked' }),
    );
    expect(again.status).toBe(422);
    const [order] = (
      await db.query(`SELECT state FROM orders WHERE placer_order_number = 'LIVE-1'`)
    ).rows;
    expect(order.state).not.toMatch(/cancel/i);
  });

  it('a revoked entry of a batch is its own 422 entry, not a 500', async () => {
    const res = await postFhir(adapter, '/fhir', {
      resourceType: 'Bundle',
      type: 'batch',
      entry: [
        {
          resource: chestCtRequest('BATCH-LIVE'),
          request: { method: 'POST', url: 'ServiceRequest' },
        },
        {
          resource: chestCtRequest('BATCH-REVOKED', { status: 'revoked' }),
          request: { method: 'POST', url: 'ServiceRequest' },
        },
      ],
    });
    expect(res.status).toBe(200);
    const entries = res.body.entry as Array<{ response: { status: string; outcome?: Json } }>;
    expect(entries.map((e) => e.response.status)).toEqual([
      '201 Created',
      '422 Unprocessable Entity',
    ]);
    expect(expressions(entries[1]!.response.outcome!)).toEqual(['Bundle.entry[1].resource.status']);
  });

  it('a NUL escaped in the narrative is stored as U+FFFD (201), not a 500; the raw bytes are kept', async () => {
    // The structure validator refuses a NUL in code.text, not in the narrative's div.
    const placer = 'NUL-1';
    const sent = JSON.stringify(chestCtRequest(placer));
    const body = sent.replace('<p><b>id</b>', `<p>\\u0000<b>id</b>`);
    expect(body).not.toBe(sent);
    const res = await postFhir(adapter, '/fhir/ServiceRequest', body);
    expect(res.status).toBe(201);
    const read = await fetch(`${adapter.httpUrl}/fhir/ServiceRequest/${String(res.body.id)}`, {
      headers: { authorization: `Bearer ${TEST_TOKENS.sender}` },
    });
    const served = (await read.json()) as { text: { div: string } };
    expect(served.text.div).toContain('<p>\uFFFD<b>id</b>');
    const stored = await lastMessage();
    expect(stored.outcome).toBe('accepted');
    expect(stored.raw.toString('utf8')).toBe(body);
    expect(await ordersWith(placer)).toHaveLength(1);
  });

  it('a lone surrogate escaped anywhere in the JSON: 422 naming the element (FHIR strings are Unicode), the raw bytes kept, no order', async () => {
    const sent = JSON.stringify(chestCtRequest('SUR-1'));
    const cases: Array<[string, string, string, string]> = [
      [
        'code.text, high alone',
        '"text":"Chest CT"',
        '"text":"Chest \\ud800 CT"',
        'ServiceRequest.code.text',
      ],
      [
        'code.text, low alone',
        '"text":"Chest CT"',
        '"text":"Chest \\udc00 CT"',
        'ServiceRequest.code.text',
      ],
      [
        'code.text, reversed pair',
        '"text":"Chest CT"',
        '"text":"\\udc00\\ud800"',
        'ServiceRequest.code.text',
      ],
      [
        'an identifier value at its end',
        '"value":"SUR-1"',
        '"value":"SUR-1\\ud83d"',
        'ServiceRequest.identifier[0].value',
      ],
      [
        'a string in an array',
        '"resourceType":"ServiceRequest"',
        '"resourceType":"ServiceRequest","instantiatesUri":["http://a.example/x","\\udfff"]',
        'ServiceRequest.instantiatesUri[1]',
      ],
      [
        'a key',
        '"resourceType":"ServiceRequest"',
        '"resourceType":"ServiceRequest","_x\\ud800":1',
        'ServiceRequest',
      ],
    ];
    for (const [what, from, to, path] of cases) {
      const body = sent.replace(from, to);
      expect(body).not.toBe(sent);
      const res = await postFhir(adapter, '/fhir/ServiceRequest', body);
      expect({ what, status: res.status, location: res.location }).toEqual({
        what,
        status: 422,
        location: null,
      });
      expect({ what, at: expressions(res.body) }).toEqual({ what, at: [path] });
      expect(JSON.stringify(res.body)).toMatch(/surrogate/);
      const stored = await lastMessage();
      expect({ what, outcome: stored.outcome, code: stored.response_code }).toEqual({
        what,
        outcome: 'rejected',
        code: '422',
      });
      expect(stored.raw.toString('utf8')).toBe(body);
    }
    expect(await ordersWith('SUR-1')).toEqual([]);
    expect(await ordersWith('SUR-1\uFFFD')).toEqual([]);
    // A proper pair (an emoji, escaped) is Unicode: accepted as sent.
    const pair = sent.replace('"text":"Chest CT"', '"text":"Chest CT \\ud83d\\ude00"');
    const ok = await postFhir(adapter, '/fhir/ServiceRequest', pair);
    expect(ok.status).toBe(201);
    expect((ok.body.code as { text: string }).text).toBe('Chest CT \u{1F600}');
    // In a Bundle entry the path runs from the Bundle.
    const bundle = JSON.stringify({
      resourceType: 'Bundle',
      type: 'batch',
      entry: [
        { resource: chestCtRequest('SUR-B'), request: { method: 'POST', url: 'ServiceRequest' } },
      ],
    }).replace('"text":"Chest CT"', '"text":"\\ud800"');
    const res = await postFhir(adapter, '/fhir', bundle);
    expect(res.status).toBe(422);
    expect(expressions(res.body)).toEqual(['Bundle.entry[0].resource.code.text']);
    expect(await ordersWith('SUR-B')).toEqual([]);
  });

  it('a ServiceRequest read from the EHR (id-only) with a lone surrogate orders nothing and is kept refused, naming the element', async () => {
    const id = 'sur-ehr';
    const seeded = chestCtRequest('SUR-EHR');
    (seeded.code as Json).text = 'Chest \ud800 CT';
    await ehr.seed({ ...seeded, id } as never);
    const focus = `${ehr.baseUrl}/ServiceRequest/${id}`;
    const body = notification(`${ehr.baseUrl}/Subscription/s-sur`, [
      [
        { name: 'event-number', valueString: '1' },
        { name: 'focus', valueReference: { reference: focus } },
      ],
    ]);
    expect((await postFhir(adapter, '/fhir/subscription-notifications', body)).status).toBe(200);
    expect(await ordersWith('SUR-EHR')).toEqual([]);
    const refused = await ehrRequestRefusal(focus);
    expect(refused).toMatchObject({ outcome: 'rejected', response_code: '422' });
    expect(expressions(refused.answer)).toEqual(['ServiceRequest.code.text']);
  });

  it('identifier values over their bound: a placer, filler or requisition number over 199 characters (HL7 EI.1, ST) or an accession over 199 is 422 on the element, kept, no order; an accession over 16 (DICOM SH) is taken with a quirk', async () => {
    const typed = (code: string, value: string) => ({
      type: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code }] },
      system: `urn:example:${code.toLowerCase()}`,
      value,
    });
    const long = (n: number, seed: string) => `${seed}-`.padEnd(n, '7');
    const cases: Array<[string, Json, string]> = [
      [
        'placer 5,000',
        { identifier: [typed('PLAC', long(5000, 'BND-P'))] },
        'ServiceRequest.identifier[0].value',
      ],
      [
        'placer 200',
        { identifier: [typed('PLAC', long(200, 'BND-P2'))] },
        'ServiceRequest.identifier[0].value',
      ],
      [
        'filler 200',
        { identifier: [typed('PLAC', 'BND-F'), typed('FILL', long(200, 'F'))] },
        'ServiceRequest.identifier[1].value',
      ],
      [
        'accession 200',
        { identifier: [typed('PLAC', 'BND-A'), typed('ACSN', long(200, 'A'))] },
        'ServiceRequest.identifier[1].value',
      ],
      [
        'requisition 200',
        { identifier: [typed('PLAC', 'BND-R')], requisition: typed('PGN', long(200, 'R')) },
        'ServiceRequest.requisition.value',
      ],
    ];
    for (const [what, changes, path] of cases) {
      const res = await postFhir(
        adapter,
        '/fhir/ServiceRequest',
        chestCtRequest('unused', changes),
      );
      expect({ what, status: res.status, at: expressions(res.body) }).toEqual({
        what,
        status: 422,
        at: [path],
      });
      expect(JSON.stringify(res.body)).toMatch(/more than the 199/);
      expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '422' });
    }
    expect(await ordersWith(long(5000, 'BND-P'))).toEqual([]);
    for (const placer of ['BND-F', 'BND-A', 'BND-R']) expect(await ordersWith(placer)).toEqual([]);
    // In a batch, the entry's own 422, under its entry.
    const batch = await postFhir(adapter, '/fhir', {
      resourceType: 'Bundle',
      type: 'batch',
      entry: [
        {
          resource: chestCtRequest(long(300, 'BND-B')),
          request: { method: 'POST', url: 'ServiceRequest' },
        },
      ],
    });
    const entry = (batch.body.entry as Array<{ response: { status: string; outcome?: Json } }>)[0]!;
    expect(entry.response.status).toBe('422 Unprocessable Entity');
    expect(expressions(entry.response.outcome)).toEqual([
      'Bundle.entry[0].resource.identifier[0].value',
    ]);
    // At the bounds: taken. A 17-character accession (longer than DICOM SH allows) is taken with a quirk.
    const at = await postFhir(
      adapter,
      '/fhir/ServiceRequest',
      chestCtRequest('unused', {
        identifier: [typed('PLAC', long(199, 'BND-OK')), typed('ACSN', 'ACC-20240318-0042')],
      }),
    );
    expect(at.status).toBe(201);
    expect(await ordersWith(long(199, 'BND-OK'))).toHaveLength(1);
    const quirks = (
      await db.query<{ quirks: Array<{ code: string; detail: string }> }>(
        `SELECT quirks FROM inbound_messages ORDER BY received_at DESC LIMIT 1`,
      )
    ).rows[0]!.quirks;
    expect(quirks).toContainEqual({
      code: 'accession-longer-than-dicom',
      detail: expect.stringMatching(/ServiceRequest\.identifier\[1\]\.value.*17 characters.*16/),
    });
  });

  it('a full-resource notification carrying two versions of one request applies the newer: a stat priority or a revoke in version 2 is not undone by version 1 before it', async () => {
    // Two events of one request in one delivery (a deliverer batching a quick edit, HAPI's
    // versions 1 and 2 of the same ServiceRequest). Before: the first entry matching the
    // focus was taken for both events, so version 1 was applied and version 2 (stat, revoked) lost.
    const send = async (sub: string, id: string, placer: string, versions: Json[]) => {
      const focus = `${ehr.baseUrl}/ServiceRequest/${id}`;
      const body = notification(
        `${ehr.baseUrl}/Subscription/${sub}`,
        versions.map((_, i) => [
          { name: 'event-number', valueString: String(i + 1) },
          { name: 'focus', valueReference: { reference: focus } },
        ]),
        versions.map((changes, i) => ({
          fullUrl: focus,
          resource: { ...chestCtRequest(placer, changes), id, meta: { versionId: String(i + 1) } },
          request: { method: 'PUT', url: `ServiceRequest/${id}` },
          response: { status: '200' },
        })),
      );
      expect((await postFhir(adapter, '/fhir/subscription-notifications', body)).status).toBe(200);
    };
    await send('s-two-versions-a', 'tv-a', 'TWO-V-A', [
      { priority: 'routine' },
      { priority: 'stat' },
    ]);
    const [stat] = (
      await db.query<{ priority: string }>(
        `SELECT request->>'priority' AS priority FROM orders WHERE placer_order_number = 'TWO-V-A'`,
      )
    ).rows;
    expect(stat).toEqual({ priority: 'stat' });
    await send('s-two-versions-b', 'tv-b', 'TWO-V-B', [{}, { status: 'revoked' }]);
    const live = (
      await db.query(
        `SELECT id FROM orders WHERE placer_order_number = 'TWO-V-B' AND state <> 'cancelled' AND cancel_requested_at IS NULL`,
      )
    ).rows;
    expect(live).toEqual([]);
  });

  it('a JSON number a double cannot hold (1e400, 1e-400, 20 significant digits): 422 on its element, kept, no order; numbers a double holds are taken', async () => {
    // JSON.parse read 1e-400 as 0 and 12345678901234567890.123 as 12345678901234567000: the
    // order was made, and the request stored and served back with a value nobody sent.
    const sent = JSON.stringify(chestCtRequest('NUM-0'));
    const withValue = (placer: string, literal: string) =>
      sent
        .replace('"NUM-0"', `"${placer}"`)
        .replace(
          '"resourceType":"ServiceRequest"',
          `"resourceType":"ServiceRequest","extension":[{"url":"http://example.org/fhir/StructureDefinition/dose","valueDecimal":${literal}}]`,
        );
    for (const [placer, literal] of [
      ['NUM-OVER', '1e400'],
      ['NUM-UNDER', '1e-400'],
      ['NUM-DIGITS', '12345678901234567890.123'],
      ['NUM-DIGITS-2', '0.12345678901234567891'],
    ]) {
      const res = await postFhir(adapter, '/fhir/ServiceRequest', withValue(placer!, literal!));
      expect({ literal, status: res.status, at: expressions(res.body) }).toEqual({
        literal,
        status: 422,
        at: ['ServiceRequest.extension[0].valueDecimal'],
      });
      expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '422' });
      expect(await ordersWith(placer!)).toEqual([]);
    }
    for (const [placer, literal, value] of [
      ['NUM-OK-1', '0.1', 0.1],
      ['NUM-OK-2', '-0', 0],
      ['NUM-OK-3', '3.14159265358979', 3.14159265358979],
      ['NUM-OK-4', '2.5E-3', 0.0025],
      ['NUM-OK-5', '1.0000000000000000000', 1],
    ] as const) {
      const res = await postFhir(adapter, '/fhir/ServiceRequest', withValue(placer, literal));
      expect({ literal, status: res.status }).toEqual({ literal, status: 201 });
      expect((res.body.extension as Array<{ valueDecimal: number }>)[0]!.valueDecimal).toBe(value);
    }
  });

  it("a patient identifier over 199 characters (random, more than an index row holds) is 422 on the Patient's identifier where it sits, kept; before, a 500 and nothing kept", async () => {
    const mrn = randomBytes(6000).toString('base64');
    const patient = {
      resourceType: 'Patient',
      id: 'p1',
      identifier: [{ system: 'urn:oid:1.2.36.146.595.217.0.1', value: mrn }],
      name: [{ family: 'SCHMIDT', given: ['Anna'] }],
      gender: 'female',
      birthDate: '1956-02-14',
    };
    const res = await postFhir(
      adapter,
      '/fhir/ServiceRequest',
      chestCtRequest('LONG-MRN-1', { contained: [patient], subject: { reference: '#p1' } }),
    );
    expect({ status: res.status, at: expressions(res.body) }).toEqual({
      status: 422,
      at: ['ServiceRequest.contained[0].identifier[0].value'],
    });
    expect(JSON.stringify(res.body)).toMatch(/patient identifier is 8000 characters/);
    expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '422' });
    expect(await ordersWith('LONG-MRN-1')).toEqual([]);
  });

  it('a notification naming a Subscription by a reference over 1,024 characters (random, more than an index row holds): 422 on parameter[subscription], kept; before, a 500 and nothing kept', async () => {
    const id = randomBytes(4500).toString('base64').replace(/[+/=]/g, 'x');
    const body = notification(`${ehr.baseUrl}/Subscription/${id}`, [
      [{ name: 'event-number', valueString: '1' }],
    ]);
    const res = await postFhir(adapter, '/fhir/subscription-notifications', body);
    expect({ status: res.status, at: expressions(res.body) }).toEqual({
      status: 422,
      at: ['Bundle.entry[0].resource.parameter[subscription]'],
    });
    expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '422' });
  });

  it('a relative reference that climbs out of FHIR_SERVER_URL: 422 on the element (a resend would fail the same), nothing read', async () => {
    for (const reference of ['../admin/Patient/1', 'Patient/dicom/../../../Patient/dicom']) {
      ehr.requests.length = 0;
      const res = await postFhir(
        adapter,
        '/fhir/ServiceRequest',
        chestCtRequest(`REL-${reference.length}`, { subject: { reference } }),
      );
      expect({ reference, status: res.status }).toEqual({ reference, status: 422 });
      expect(expressions(res.body)).toEqual(['ServiceRequest.subject']);
      expect((res.body.issue as Json[])[0]).toMatchObject({ code: 'security' });
      expect(ehr.requests.filter((r) => r.url.includes('Patient'))).toEqual([]);
      expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '422' });
    }
  });

  it.each([
    [
      'entry is not an array',
      { resourceType: 'Bundle', type: 'history', entry: 'x' },
      'Bundle.entry',
    ],
    ['a null entry', { resourceType: 'Bundle', type: 'history', entry: [null] }, 'Bundle.entry[0]'],
    [
      'parameter an object',
      {
        resourceType: 'Bundle',
        type: 'history',
        entry: [{ resource: { resourceType: 'Parameters', parameter: {} } }],
      },
      'Bundle.entry[0].resource.parameter',
    ],
    [
      'a part that is an object',
      (sub: string) => {
        const n = notification(sub, []);
        const params = ((n.entry as Json[])[0]!.resource as { parameter: Json[] }).parameter;
        params.push({ name: 'notification-event', part: {} });
        return n;
      },
      'Bundle.entry[0].resource.parameter[notification-event][0].part',
    ],
    [
      'a subscription reference that is an object',
      (sub: string) => {
        const n = notification(sub, [[{ name: 'event-number', valueString: '1' }]]);
        const params = ((n.entry as Json[])[0]!.resource as { parameter: Json[] }).parameter;
        params[0] = { name: 'subscription', valueReference: { reference: { id: 1 } } };
        return n;
      },
      'Bundle.entry[0].resource.parameter[subscription].valueReference.reference',
    ],
    [
      'a timestamp that is no instant',
      (sub: string) =>
        notification(sub, [
          [
            { name: 'event-number', valueString: '1' },
            { name: 'timestamp', valueInstant: 'yesterday' },
            { name: 'focus', valueReference: { reference: 'ServiceRequest/nope' } },
          ],
        ]),
      'Bundle.entry[0].resource.parameter[notification-event][0].part[1]',
    ],
    [
      'draft-2021 SubscriptionStatus, notificationEvent an object',
      {
        resourceType: 'Bundle',
        type: 'history',
        entry: [
          {
            resource: {
              resourceType: 'SubscriptionStatus',
              type: 'event-notification',
              subscription: { reference: 'Subscription/s' },
              notificationEvent: {},
            },
          },
        ],
      },
      'Bundle.entry[0].resource.notificationEvent',
    ],
  ] as Array<[string, Json | ((sub: string) => Json), string]>)(
    'a notification (%s): 422 naming it, recorded, /health answers',
    async (_what, make, expression) => {
      const body = typeof make === 'function' ? make(`${ehr.baseUrl}/Subscription/s`) : make;
      const res = await postFhir(adapter, '/fhir/subscription-notifications', body);
      expect({ status: res.status, expressions: expressions(res.body) }).toEqual({
        status: 422,
        expressions: [expression],
      });
      const stored = await lastMessage();
      expect(stored).toMatchObject({
        transport: 'fhir-subscription',
        outcome: 'rejected',
        response_code: '422',
      });
      expect(JSON.parse(stored.raw.toString('utf8'))).toEqual(body);
      expect((await fetch(`${adapter.httpUrl}/health`)).status).toBe(200);
    },
  );

  it('a full-resource entry of a shape the parser does not check is a recorded 422, not a 500', async () => {
    const sub = `${ehr.baseUrl}/Subscription/s-shape`;
    const focus = `${ehr.baseUrl}/ServiceRequest/x7`;
    const body = notification(
      sub,
      [
        [
          { name: 'event-number', valueString: '1' },
          { name: 'focus', valueReference: { reference: focus } },
        ],
      ],
      [{ fullUrl: focus, resource: { ...chestCtRequest('X7'), id: 'x7', identifier: 'X7' } }],
    );
    const res = await postFhir(adapter, '/fhir/subscription-notifications', body);
    // The notification is answered (the EHR resending it would change nothing); the request
    // it carried is kept refused, 422 on its element, like every EHR request that cannot be an
    // order. (It was 422 for the whole notification, through a TypeError in the mapping.)
    expect(res.status).toBe(200);
    const refused = await ehrRequestRefusal(focus);
    expect(refused).toMatchObject({ outcome: 'rejected', response_code: '422' });
    expect(expressions(refused.answer)).toContain('ServiceRequest.identifier');
  });

  it('a full-resource request the REST door would refuse (a dateTime without zone, a narrative with <script>) orders nothing and is kept refused, naming the element', async () => {
    // Before: the order was made with requestedAt '2013-05-08T09' (refused at POST
    // /fhir/ServiceRequest since it became an invalid DiagnosticReport effectiveDateTime), and
    // the <script> narrative was stored and served back by GET /fhir/ServiceRequest/{id}.
    const sub = `${ehr.baseUrl}/Subscription/s-r4-rules`;
    for (const [n, id, changes, where] of [
      [1, 'nv1', { occurrenceDateTime: '2013-05-08T09' }, 'ServiceRequest.occurrenceDateTime'],
      [
        2,
        'nv2',
        {
          text: {
            status: 'generated',
            div: '<div xmlns="http://www.w3.org/1999/xhtml"><script>alert(1)</script></div>',
          },
        },
        'ServiceRequest.text.div',
      ],
    ] as const) {
      const focus = `${ehr.baseUrl}/ServiceRequest/${id}`;
      const body = notification(
        sub,
        [
          [
            { name: 'event-number', valueString: String(n) },
            { name: 'focus', valueReference: { reference: focus } },
          ],
        ],
        [{ fullUrl: focus, resource: { ...chestCtRequest(`NV-${n}`, changes), id } }],
      );
      expect((await postFhir(adapter, '/fhir/subscription-notifications', body)).status).toBe(200);
      expect(await ordersWith(`NV-${n}`)).toEqual([]);
      const refused = await ehrRequestRefusal(focus);
      expect(refused).toMatchObject({ outcome: 'rejected', response_code: '422' });
      expect(expressions(refused.answer)).toEqual([where]);
    }
  });

  it("a notified request whose subject is on another server orders nothing and is kept refused; the notification's other events are ordered (200), nothing is read there", async () => {
    // Before: the resolver's refusal of the foreign subject (422) refused the whole
    // notification, so the other request of the same delivery was never ordered, and the
    // EHR's resend was refused the same way for ever. A request the door cannot order is the
    // request's refusal, as a dateTime without zone is (test above): 200 with a warning.
    const elsewhere = createServer((req, res) => {
      seenElsewhere.push(`${req.method ?? ''} ${req.url ?? ''}`);
      req.resume();
      res.writeHead(404).end();
    });
    const seenElsewhere: string[] = [];
    await new Promise<void>((resolve) => elsewhere.listen(0, '127.0.0.1', resolve));
    const other = `http://127.0.0.1:${(elsewhere.address() as AddressInfo).port}/fhir`;
    try {
      const sub = `${ehr.baseUrl}/Subscription/s-foreign-subject`;
      const good = `${ehr.baseUrl}/ServiceRequest/fs-good`;
      const foreign = `${ehr.baseUrl}/ServiceRequest/fs-foreign`;
      const event = (n: number, focus: string) => [
        { name: 'event-number', valueString: String(n) },
        { name: 'focus', valueReference: { reference: focus } },
      ];
      const full = notification(
        sub,
        [event(1, good), event(2, foreign)],
        [
          { fullUrl: good, resource: { ...chestCtRequest('FS-GOOD'), id: 'fs-good' } },
          {
            fullUrl: foreign,
            resource: {
              ...chestCtRequest('FS-FOREIGN', { subject: { reference: `${other}/Patient/dicom` } }),
              id: 'fs-foreign',
            },
          },
        ],
      );
      const res = await postFhir(adapter, '/fhir/subscription-notifications', full);
      expect(res.status).toBe(200);
      expect(await ordersWith('FS-GOOD')).toHaveLength(1);
      expect(await ordersWith('FS-FOREIGN')).toEqual([]);
      const refused = await ehrRequestRefusal(foreign);
      expect(refused).toMatchObject({ outcome: 'rejected', response_code: '422' });
      expect(expressions(refused.answer)).toEqual(['ServiceRequest.subject']);
      expect(JSON.stringify(res.body)).toContain(foreign);

      // id-only: the request read from the EHR names its subject elsewhere.
      await ehr.seed({
        ...chestCtRequest('FS-FOREIGN-2', { subject: { reference: `${other}/Patient/dicom` } }),
        id: 'fs-foreign-2',
      } as never);
      const idOnly = await postFhir(
        adapter,
        '/fhir/subscription-notifications',
        notification(sub, [event(3, `${ehr.baseUrl}/ServiceRequest/fs-foreign-2`)]),
      );
      expect(idOnly.status).toBe(200);
      expect(await ordersWith('FS-FOREIGN-2')).toEqual([]);
      expect(seenElsewhere).toEqual([]);
    } finally {
      elsewhere.closeAllConnections();
      await new Promise<void>((resolve) => elsewhere.close(() => resolve()));
    }
  });

  it("a notification naming a Subscription on another server: 422 on parameter[subscription], the EHR's credential goes nowhere", async () => {
    ehr.requests.length = 0;
    const res = await postFhir(
      adapter,
      '/fhir/subscription-notifications',
      notification('https://other-ehr.example.org/fhir/Subscription/s1', [
        [
          { name: 'event-number', valueString: '1' },
          { name: 'focus', valueReference: { reference: 'ServiceRequest/a9' } },
        ],
      ]),
    );
    expect(res.status).toBe(422);
    expect(expressions(res.body)).toEqual(['Bundle.entry[0].resource.parameter[subscription]']);
    expect(ehr.requests).toEqual([]);
    expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '422' });
  });
  it('a notification of 3,000 events, and a 199-character random placer number, are stored (their idempotency keys fit the index), and a resend is a duplicate', async () => {
    const events = Array.from({ length: 3000 }, (_, i) => [
      { name: 'event-number', valueString: String(100_000 + ((i * 7919) % 99_991)) },
    ]);
    const body = notification(`${ehr.baseUrl}/Subscription/s-many`, events);
    const first = await postFhir(adapter, '/fhir/subscription-notifications', body);
    expect(first.status).toBe(200);
    expect(await lastMessage()).toMatchObject({ outcome: 'accepted', response_code: '200' });
    const again = await postFhir(adapter, '/fhir/subscription-notifications', body);
    expect(again.status).toBe(200);
    expect(JSON.stringify(again.body)).toMatch(/already processed/);

    // The longest placer number taken (199 characters, HL7 EI.1), of random characters.
    const placer = Array.from({ length: 199 }, (_, i) =>
      String.fromCharCode(33 + ((i * 7919 + 13) % 94)),
    )
      .join('')
      .replace(/[|\\^~&]/g, 'x');
    const created = await postFhir(adapter, '/fhir/ServiceRequest', chestCtRequest(placer));
    expect(created.status).toBe(201);
    const resent = await postFhir(adapter, '/fhir/ServiceRequest', chestCtRequest(placer));
    expect({ status: resent.status, id: resent.body.id }).toEqual({
      status: 200,
      id: created.body.id,
    });
  });
  it('a body with one element twice, in another charset, or not UTF-8 has no one meaning: refused and kept', async () => {
    const send = async (bytes: Buffer, contentType = 'application/fhir+json') => {
      const res = await fetch(`${adapter.httpUrl}/fhir/ServiceRequest`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TEST_TOKENS.sender}`, 'content-type': contentType },
        body: bytes,
      });
      return { status: res.status, body: (await res.json()) as Json };
    };
    // "active" then "revoked": JSON.parse would keep the last, another reader the first
    const text = JSON.stringify(chestCtRequest('DUP-KEY-1')).replace(
      '"status":"active"',
      '"status":"active","status":"revoked"',
    );
    expect(text).toContain('"status":"active","status":"revoked"');
    const twice = await send(Buffer.from(text, 'utf8'));
    expect(twice.status).toBe(400);
    expect(expressions(twice.body)).toEqual(['ServiceRequest.status']);
    expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '400' });
    expect((await lastMessage()).raw.toString('utf8')).toBe(text);
    expect(await ordersWith('DUP-KEY-1')).toEqual([]);

    // a Latin-1 body says so: 415 (FHIR bodies are UTF-8), not a silent U+FFFD in the patient name
    const latin1 = Buffer.from(
      JSON.stringify(chestCtRequest('CHARSET-1', { note: [{ text: 'Müller' }] })),
      'latin1',
    );
    const declared = await send(latin1, 'application/fhir+json; charset=ISO-8859-1');
    expect(declared.status).toBe(415);
    expect(JSON.stringify(declared.body)).toMatch(/charset iso-8859-1 is not supported/);
    // … and undeclared it is not UTF-8 at all: 400
    const undeclared = await send(latin1);
    expect(undeclared.status).toBe(400);
    expect(JSON.stringify(undeclared.body)).toMatch(/not valid UTF-8/);
    expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '400' });
    expect(await ordersWith('CHARSET-1')).toEqual([]);

    // the same body in UTF-8, with the charset said or not, is an order
    const utf8 = Buffer.from(
      JSON.stringify(chestCtRequest('CHARSET-1', { note: [{ text: 'Müller' }] })),
      'utf8',
    );
    expect((await send(utf8, 'application/fhir+json; charset=UTF-8')).status).toBe(201);
  });
  it.each([
    [
      'a transaction Bundle of 2,500 ServiceRequests (3 MB)',
      '/fhir',
      () => ({
        resourceType: 'Bundle',
        type: 'transaction',
        entry: Array.from({ length: 2_500 }, (_, i) => ({
          fullUrl: `urn:uuid:7d3b1e2a-0000-4000-8000-${String(i).padStart(12, '0')}`,
          resource: chestCtRequest(`COST-B-${i}`),
          request: { method: 'POST', url: 'ServiceRequest' },
        })),
      }),
      /more than 20000 JSON values \(FHIR_MAX_JSON_VALUES\)/,
    ],
    [
      'a ServiceRequest with 40,000 extensions',
      '/fhir/ServiceRequest',
      () =>
        chestCtRequest('COST-E', {
          extension: Array.from({ length: 40_000 }, (_, i) => ({
            url: `http://example.org/fhir/StructureDefinition/x-${i}`,
            valueString: 'v',
          })),
        }),
      /more than 20000 JSON values/,
    ],
    [
      'an extension nested 5,000 deep',
      '/fhir/ServiceRequest',
      () =>
        JSON.stringify(chestCtRequest('COST-D', { extension: ['NEST'] })).replace(
          '"NEST"',
          '{"url":"http://example.org/n","extension":['.repeat(5_000) +
            '{"url":"http://example.org/l","valueString":"x"}' +
            ']}'.repeat(5_000),
        ),
      /nests deeper than 100 levels/,
    ],
  ] as Array<[string, string, () => Json | string, RegExp]>)(
    'a body too costly to read (%s): 413 too-costly before any check, recorded, /health answers meanwhile',
    async (_what, path, make, diagnostics) => {
      const made = make();
      const body = typeof made === 'string' ? made : JSON.stringify(made);
      let slowestHealthMs = 0;
      let posting = true;
      const polling = (async () => {
        while (posting) {
          const t0 = Date.now();
          expect((await fetch(`${adapter.httpUrl}/health`)).status).toBe(200);
          slowestHealthMs = Math.max(slowestHealthMs, Date.now() - t0);
          await new Promise((r) => setTimeout(r, 10));
        }
      })();
      const res = await postFhir(adapter, path, body).finally(() => {
        posting = false;
      });
      await polling;
      expect(res.status).toBe(413);
      expect(res.body.issue).toEqual([
        expect.objectContaining({
          code: 'too-costly',
          diagnostics: expect.stringMatching(diagnostics),
        }),
      ]);
      const stored = await lastMessage();
      expect(stored).toMatchObject({ outcome: 'rejected', response_code: '413' });
      expect(stored.raw.length).toBe(Buffer.byteLength(body));
      // before the bound, the Bundle held the event loop (and /health) for 2.4 s
      expect(slowestHealthMs).toBeLessThan(1_500);
    },
  );

  it("a request that replaces an earlier one (ServiceRequest.replaces) is ordered, and the replaced order's cancel is requested (test/inbound-fhir/fhir-replaces.test.ts has every case)", async () => {
    // An EHR changing an order as a new request that `replaces` the first (R4
    // servicerequest.html#replaces). Before: both orders ran, the message carried the quirk
    // fhir-replaces-not-honoured and nothing else.
    const first = await postFhir(adapter, '/fhir/ServiceRequest', chestCtRequest('RPL-1'));
    expect(first.status).toBe(201);
    const second = await postFhir(
      adapter,
      '/fhir/ServiceRequest',
      chestCtRequest('RPL-2', {
        replaces: [{ reference: `ServiceRequest/${first.body.id as string}` }],
      }),
    );
    expect(second.status).toBe(201);
    expect(await ordersWith('RPL-1')).toHaveLength(1);
    expect(await ordersWith('RPL-2')).toHaveLength(1);
    const { rows } = await db.query<{ outcome: string }>(
      `SELECT detail->>'outcome' AS outcome FROM audit_events WHERE order_id = $1 AND kind = 'order.replaced'`,
      [first.body.id],
    );
    // cancelled as replaced, or (the place job having failed it first: no study) ended already
    expect(rows.map((r) => r.outcome)).toEqual([expect.stringMatching(/^(cancel|ended)$/)]);
  });

  it('a Bundle of 100 orders is within the bound and read as usual', async () => {
    const res = await postFhir(adapter, '/fhir', {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: Array.from({ length: 100 }, (_, i) => ({
        fullUrl: `urn:uuid:7d3b1e2a-0000-4000-8001-${String(i).padStart(12, '0')}`,
        resource: chestCtRequest(`COST-OK-${i}`),
        request: { method: 'POST', url: 'ServiceRequest' },
      })),
    });
    expect(res.status).toBe(200);
    expect((res.body.entry as unknown[]).length).toBe(100);
  });
});
