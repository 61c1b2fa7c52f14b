import { createMrBrainSeries } from '../helpers/dicom-factory';
import {
  MINUTE,
  newOrder,
  startHarness,
  statusOf,
  uploadSingle,
  type Harness,
} from './sandbox-test-kit';

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('sandbox: orders, metadata and identifiers', () => {
  let h: Harness;
  let t: string;
  beforeAll(async () => {
    h = await startHarness();
    t = await h.token();
  });
  afterAll(async () => h.close());

  it('creates an order with a UUIDv4 id, status PENDING before any upload', async () => {
    const r = await h.call('POST', '/new-order', {
      token: t,
      json: { patient_id: 'SBX-1', priority: 'urgent', correlation_id: 'adapter-42' },
    });
    expect(r.status).toBe(201);
    expect(r.json.order_id).toMatch(UUID_V4);
    const s = await h.call('GET', '/status', {
      token: t,
      query: { order_id: r.json.order_id as string },
    });
    expect(s.json).toMatchObject({ order_id: r.json.order_id, status: 'PENDING', study_uid: null });
    expect(typeof s.json.updated_at).toBe('string');
  });

  it('creates an order through the legacy GET /new-order with products comma-separated', async () => {
    const r = await h.call('GET', '/new-order', {
      token: t,
      query: { patient_id: 'SBX-2', products: 'neuro-volumetry,hippocampal-atrophy' },
    });
    expect(r.status).toBe(201);
    const m = await h.call('GET', '/metadata', {
      token: t,
      query: { order_id: r.json.order_id as string },
    });
    expect(m.json.metadata).toEqual({
      patient_id: 'SBX-2',
      products: ['neuro-volumetry', 'hippocampal-atrophy'],
    });
  });

  it('answers 400 malformed_json, 415 for a wrong content type and 400 empty_body', async () => {
    const malformed = await h.call('POST', '/new-order', {
      token: t,
      body: '{"patient_id": ',
      headers: { 'content-type': 'application/json' },
    });
    expect(malformed.status).toBe(400);
    expect(malformed.json.error).toBe('malformed_json');
    const wrongType = await h.call('POST', '/new-order', {
      token: t,
      body: 'patient_id=1',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(wrongType.status).toBe(415);
    const empty = await h.call('POST', '/new-order', {
      token: t,
      body: '',
      headers: { 'content-type': 'application/json' },
    });
    expect(empty.status).toBe(400);
    expect(empty.json.error).toBe('empty_body');
    const notObject = await h.call('POST', '/new-order', { token: t, json: ['a'] });
    expect(notObject.status).toBe(400);
  });

  it('validates metadata values and names the offending key', async () => {
    for (const [body, key] of [
      [{ patient_sex: 'X' }, 'patient_sex'],
      [{ patient_birth_date: '1958-04-12' }, 'patient_birth_date'],
      [{ study_uid: '1.2.abc' }, 'study_uid'],
      [{ products: ['no-such-product'] }, 'products'],
      [{ sandbox_outcome: 'explode' }, 'sandbox_outcome'],
      [{ priority: 'whenever' }, 'priority'],
      [{ patient_id: { nested: true } }, 'patient_id'],
    ] as const) {
      const r = await h.call('POST', '/new-order', { token: t, json: body });
      expect([key, r.status, r.json.error]).toEqual([key, 400, 'invalid_metadata']);
      expect(r.json.message).toContain(key);
    }
  });

  it('adds metadata, returns all current metadata, and removes a key with null', async () => {
    const id = await newOrder(h, { patient_id: 'SBX-3', accession_number: 'ACC-1' });
    const r = await h.call('PATCH', '/add-metadata', {
      token: t,
      query: { order_id: id },
      json: { priority: 'stat', accession_number: null },
    });
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ order_id: id, metadata: { patient_id: 'SBX-3', priority: 'stat' } });
    const m = await h.call('GET', '/metadata', { token: t, query: { order_id: id } });
    expect(m.json.metadata).toEqual({ patient_id: 'SBX-3', priority: 'stat' });
  });

  it('gives API metadata precedence over DICOM tags, whichever came first', async () => {
    const [instance] = createMrBrainSeries({
      patient: {
        patientId: 'DICOM-PID',
        patientName: 'Tagged^Name',
        birthDate: '19700101',
        sex: 'M',
      },
      study: {
        accessionNumber: 'DICOM-ACC',
        procedureCode: { value: 'MRBRAIN', scheme: 'L', meaning: 'MRI brain' },
      },
      series: { slices: 1 },
    });
    const id = await newOrder(h, { patient_id: 'API-PID', sandbox_outcome: 'in_review' });
    await uploadSingle(h, id, instance.bytes);
    await h.call('PATCH', '/add-metadata', {
      token: t,
      query: { order_id: id },
      json: { accession_number: 'API-ACC' },
    });
    const m = (await h.call('GET', '/metadata', { token: t, query: { order_id: id } })).json
      .metadata as Record<string, unknown>;
    expect(m).toMatchObject({
      patient_id: 'API-PID',
      accession_number: 'API-ACC',
      patient_name: 'Tagged^Name',
      patient_birth_date: '19700101',
      patient_sex: 'M',
      modality: 'MR',
      procedure_code: 'MRBRAIN',
      study_uid: instance.studyInstanceUid,
    });
    // Removing the API value lets the DICOM value show through again.
    await h.call('PATCH', '/add-metadata', {
      token: t,
      query: { order_id: id },
      json: { patient_id: null },
    });
    const after = (await h.call('GET', '/metadata', { token: t, query: { order_id: id } })).json
      .metadata as Record<string, unknown>;
    expect(after.patient_id).toBe('DICOM-PID');
  });

  it('addresses by study_uid on status, results, failure-report, metadata and add-metadata; the most recent order wins', async () => {
    const uid = '1.2.826.0.1.3680043.8.498.77';
    const older = await newOrder(h, { study_uid: uid, patient_id: 'old' });
    await h.sandbox.advance(1000);
    const newer = await newOrder(h, { study_uid: uid, patient_id: 'new' });
    const s = await h.call('GET', '/status', { token: t, query: { study_uid: uid } });
    expect(s.json.order_id).toBe(newer);
    const m = await h.call('GET', '/metadata', { token: t, query: { study_uid: uid } });
    expect(m.json.order_id).toBe(newer);
    const patch = await h.call('PATCH', '/add-metadata', {
      token: t,
      query: { study_uid: uid },
      json: { priority: 'asap' },
    });
    expect(patch.json.order_id).toBe(newer);
    const results = await h.call('GET', '/results', {
      token: t,
      query: { study_uid: uid, report_type: 'PDF' },
    });
    expect(results.status).toBe(409); // addressed the newer order, which has no results yet
    const failure = await h.call('GET', '/failure-report', {
      token: t,
      query: { study_uid: uid, report_type: 'CSV' },
    });
    expect(failure.status).toBe(404);
    expect(failure.json.error).toBe('report_not_available');
    // order_id is preferred when both are given.
    const both = await h.call('GET', '/status', {
      token: t,
      query: { study_uid: uid, order_id: older },
    });
    expect(both.json.order_id).toBe(older);
    const unknownUid = await h.call('GET', '/status', { token: t, query: { study_uid: '9.9.9' } });
    expect(unknownUid.status).toBe(404);
  });

  it('answers 400 for a missing or malformed order id and 404 for an unknown one', async () => {
    const missing = await h.call('GET', '/status', { token: t });
    expect(missing.status).toBe(400);
    const malformed = await h.call('GET', '/status', {
      token: t,
      query: { order_id: 'not-a-uuid' },
    });
    expect(malformed.status).toBe(400);
    expect(malformed.json.error).toBe('invalid_parameter');
    const unknown = await h.call('GET', '/status', {
      token: t,
      query: { order_id: '3b241101-e2bb-4255-8caf-4136c566a962' },
    });
    expect(unknown.status).toBe(404);
    const studyOnlyWhereNotAllowed = await h.call('PATCH', '/cancel-order', {
      token: t,
      query: { study_uid: '1.2.3' },
    });
    expect(studyOnlyWhereNotAllowed.status).toBe(400);
  });

  it('cancels an order in progress permanently', async () => {
    const id = await newOrder(h, { patient_id: 'to-cancel' });
    const [instance] = createMrBrainSeries({ series: { slices: 1 } });
    await uploadSingle(h, id, instance.bytes);
    const r = await h.call('PATCH', '/cancel-order', { token: t, query: { order_id: id } });
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ order_id: id, status: 'CANCELLED' });
    await h.sandbox.advance(10 * MINUTE);
    expect(await statusOf(h, id)).toBe('CANCELLED');
    const again = await h.call('PATCH', '/cancel-order', { token: t, query: { order_id: id } });
    expect(again.status).toBe(409);
    expect(again.json.error).toBe('order_terminal');
    const url = await h.call('GET', '/upload/single-put', { token: t, query: { order_id: id } });
    expect(url.status).toBe(409);
    const meta = await h.call('PATCH', '/add-metadata', {
      token: t,
      query: { order_id: id },
      json: { priority: 'stat' },
    });
    expect(meta.status).toBe(409);
    const list = (await h.call('GET', '/list-orders', { token: t })).json.orders as {
      order_id: string;
    }[];
    expect(list.map((o) => o.order_id)).not.toContain(id);
  });

  it('lists active orders with timestamps, status and associations', async () => {
    const id = await newOrder(h, { study_uid: '1.2.826.0.1.3680043.8.498.5' });
    const batch = await h.call('POST', '/new-batch', {
      token: t,
      json: { products: ['neuro-volumetry'] },
    });
    await h.call('PATCH', '/associate-order-to-batch', {
      token: t,
      query: { order_id: id, batch_id: batch.json.batch_id as string },
    });
    const list = (await h.call('GET', '/list-orders', { token: t })).json.orders as Record<
      string,
      unknown
    >[];
    const entry = list.find((o) => o.order_id === id);
    expect(entry).toMatchObject({
      status: 'PENDING',
      study_uid: '1.2.826.0.1.3680043.8.498.5',
      batch_id: batch.json.batch_id,
    });
    expect(Date.parse(entry!.created_at as string)).not.toBeNaN();
    expect(Date.parse(entry!.updated_at as string)).not.toBeNaN();
  });

  it('lists products with UDI and fda_desc, null when unassigned', async () => {
    const r = await h.call('GET', '/products', { token: t });
    expect(r.status).toBe(200);
    const products = r.json.products as Record<string, unknown>[];
    expect(products.length).toBeGreaterThan(1);
    for (const p of products) {
      expect(p).toHaveProperty('UDI');
      expect(p).toHaveProperty('fda_desc');
    }
    expect(products.some((p) => p.UDI === null && p.fda_desc === null)).toBe(true);
    expect(products.some((p) => typeof p.UDI === 'string' && typeof p.fda_desc === 'string')).toBe(
      true,
    );
  });

  it('reports recent activity with camelCase keys', async () => {
    const id = await newOrder(h, {});
    await h.call('PATCH', '/cancel-order', { token: t, query: { order_id: id } });
    const r = await h.call('GET', '/recent-activity', { token: t });
    expect(r.status).toBe(200);
    const mine = (r.json.activity as Record<string, unknown>[]).filter((a) => a.orderId === id);
    expect(mine[0]).toMatchObject({
      orderId: id,
      status: 'CANCELLED',
      statusDesc: 'cancelled by the user',
      failureReason: null,
    });
    expect(Object.keys(mine[0]).every((k) => /^[a-z][A-Za-z]*$/.test(k))).toBe(true);
  });
});
