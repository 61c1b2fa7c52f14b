import { createMrBrainSeries, zipStudy } from '../helpers/dicom-factory';
import {
  MINUTE,
  SECOND,
  assertValidPdf,
  assertValidPng,
  historyOf,
  newOrder,
  processedOrder,
  putObject,
  singlePutUrl,
  startHarness,
  statusOf,
  type Harness,
} from './sandbox-test-kit';

/** Creates an order with the given outcome, uploads one MR slice, and returns the order id. */
async function processed(
  h: Harness,
  outcome: string,
  extra: Record<string, unknown> = {},
): Promise<string> {
  return processedOrder(h, { sandbox_outcome: outcome, patient_id: 'SBX-PROC', ...extra });
}

describe('sandbox: simulated processing, outcomes and reports', () => {
  let h: Harness;
  let t: string;
  beforeAll(async () => {
    h = await startHarness();
    t = await h.token();
  });
  afterAll(async () => h.close());

  const get = (path: string, query: Record<string, string>) =>
    h.call('GET', path, { token: t, query });

  it('walks RECEIVED → QUEUED → ELIGIBILITY_CHECK_RUNNING → QC_PASSED → PREPROCESSING → ANALYSIS_RUNNING → DELIVERED', async () => {
    const id = await processed(h, 'delivered');
    const seen = [await statusOf(h, id)];
    for (let i = 0; i < 12; i++) {
      await h.sandbox.advance(1 * SECOND);
      const s = await statusOf(h, id);
      if (s !== seen[seen.length - 1]) seen.push(s);
    }
    expect(seen).toEqual([
      'RECEIVED',
      'QUEUED',
      'ELIGIBILITY_CHECK_RUNNING',
      'QC_PASSED',
      'PREPROCESSING',
      'ANALYSIS_RUNNING',
      'DELIVERED',
    ]);
    expect(await historyOf(h, id)).toEqual(['PENDING', ...seen]);
    const list = (await h.call('GET', '/list-orders', { token: t })).json.orders as {
      order_id: string;
    }[];
    expect(list.map((o) => o.order_id)).not.toContain(id); // DELIVERED is terminal, so no longer active
  });

  it('serves real documents of every report type for a delivered order, deterministic per order', async () => {
    const id = await processed(h, 'delivered');
    const early = await get('/results', { order_id: id, report_type: 'JSON' });
    expect(early.status).toBe(409);
    expect(early.json.error).toBe('report_not_available');
    await h.sandbox.advance(MINUTE);

    const pdf = await get('/results', { order_id: id, report_type: 'PDF' });
    expect(pdf.status).toBe(200);
    expect(pdf.headers.get('content-type')).toBe('application/pdf');
    expect(pdf.headers.get('content-disposition')).toBe(`inline; filename="results-${id}.pdf"`);
    const { text } = assertValidPdf(pdf.buffer);
    expect(text).toContain(id);
    expect(text).toMatch(/Left hippocampus\s+\d+\.\d\d mL/);

    const png = await get('/results', { order_id: id, report_type: 'PNG' });
    expect(png.headers.get('content-type')).toBe('image/png');
    expect(assertValidPng(png.buffer).width).toBe(640);

    const json = await get('/results', { order_id: id, report_type: 'JSON' });
    const findings = json.json.findings as {
      structure: string;
      volume_ml: number;
      percentile: number;
    }[];
    expect(findings.map((f) => f.structure)).toEqual([
      'Total intracranial volume',
      'Whole brain',
      'Grey matter',
      'White matter',
      'Left hippocampus',
      'Right hippocampus',
      'Lateral ventricles',
    ]);
    const byName = Object.fromEntries(findings.map((f) => [f.structure, f.volume_ml]));
    expect(byName['Whole brain']).toBeLessThan(byName['Total intracranial volume']);
    expect(byName['Grey matter'] + byName['White matter']).toBeCloseTo(byName['Whole brain'], 0);
    expect(byName['Left hippocampus']).toBeGreaterThan(1.5);
    expect(byName['Left hippocampus']).toBeLessThan(6.5);
    for (const f of findings) expect(f.percentile).toBeGreaterThanOrEqual(1);
    expect(json.json).toMatchObject({ order_id: id, patient_id: 'SBX-PROC', qc_bypassed: false });

    const xml = await get('/results', { order_id: id, report_type: 'XML' });
    expect(xml.headers.get('content-type')).toMatch(/^application\/xml/);
    expect(xml.text).toMatch(/^<\?xml version="1.0" encoding="UTF-8"\?>\n<volumetryReport>/);
    expect(xml.text).toContain(`<order_id>${id}</order_id>`);
    expect(xml.text.trimEnd().endsWith('</volumetryReport>')).toBe(true);

    const txt = await get('/results', { order_id: id, report_type: 'TXT' });
    expect(txt.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(txt.text).toContain('Brain MRI Volumetry Report');

    const again = await get('/results', { order_id: id, report_type: 'JSON' });
    expect(again.json.findings).toEqual(json.json.findings);
    const csv = await get('/results', { order_id: id, report_type: 'CSV' });
    expect(csv.status).toBe(400); // CSV is a failure-report format only
    const missing = await get('/results', { order_id: id });
    expect(missing.status).toBe(400);
    const lower = await get('/results', { order_id: id, report_type: 'pdf' });
    expect(lower.status).toBe(400);
  });

  it('fails at analysis with a failure report in PDF, PNG, TXT, JSON, XML and CSV', async () => {
    const id = await processed(h, 'failed');
    await h.sandbox.advance(MINUTE);
    expect(await statusOf(h, id)).toBe('FAILED');
    const activity = (await h.call('GET', '/recent-activity', { token: t })).json.activity as {
      orderId: string;
      status: string;
      failureReason: string | null;
    }[];
    expect(activity.find((a) => a.orderId === id && a.status === 'FAILED')!.failureReason).toMatch(
      /analysis failed/,
    );
    const csv = await get('/failure-report', { order_id: id, report_type: 'CSV' });
    expect(csv.status).toBe(200);
    expect(csv.headers.get('content-type')).toMatch(/^text\/csv/);
    const [header, row] = csv.text.trim().split('\r\n');
    expect(header).toBe('order_id,study_uid,status,failed_step,failed_at,reason,institution_name');
    expect(row.startsWith(`${id},`)).toBe(true);
    assertValidPdf((await get('/failure-report', { order_id: id, report_type: 'PDF' })).buffer);
    assertValidPng((await get('/failure-report', { order_id: id, report_type: 'PNG' })).buffer);
    expect(
      (await get('/failure-report', { order_id: id, report_type: 'JSON' })).json,
    ).toMatchObject({ order_id: id, status: 'FAILED', failed_step: 'FAILED' });
    expect((await get('/failure-report', { order_id: id, report_type: 'XML' })).text).toContain(
      '<failureReport>',
    );
    expect((await get('/failure-report', { order_id: id, report_type: 'TXT' })).text).toContain(
      'Reason: analysis failed',
    );
    expect((await get('/results', { order_id: id, report_type: 'PDF' })).status).toBe(409);
    expect((await get('/failure-report', { order_id: id, report_type: 'DOCX' })).status).toBe(400);
  });

  it('keeps institution names with spaces and punctuation intact in every failure-report format (1.0.8)', async () => {
    const institution = 'Hôpital "Saint-Jean", Lyon & Co. <Neuro>';
    const id = await processed(h, 'failed', { institution_name: institution });
    await h.sandbox.advance(MINUTE);
    const csv = await get('/failure-report', { order_id: id, report_type: 'CSV' });
    // RFC 4180: the cell is quoted and inner quotes doubled.
    expect(csv.text).toContain('"Hôpital ""Saint-Jean"", Lyon & Co. <Neuro>"');
    expect(
      (await get('/failure-report', { order_id: id, report_type: 'JSON' })).json.institution_name,
    ).toBe(institution);
    expect((await get('/failure-report', { order_id: id, report_type: 'XML' })).text).toContain(
      '<institution_name>Hôpital &quot;Saint-Jean&quot;, Lyon &amp; Co. &lt;Neuro&gt;</institution_name>',
    );
    expect((await get('/failure-report', { order_id: id, report_type: 'TXT' })).text).toContain(
      `Institution: ${institution}`,
    );
    assertValidPdf((await get('/failure-report', { order_id: id, report_type: 'PDF' })).buffer);
    // Without an API value, the DICOM InstitutionName (0008,0080) is used.
    const fromDicom = await processed(h, 'failed');
    await h.sandbox.advance(MINUTE);
    expect(
      (await get('/failure-report', { order_id: fromDicom, report_type: 'JSON' })).json
        .institution_name,
    ).toBe('Sandbox Imaging Center');
  });

  it('fails at preprocessing with PREPROCESSING_FAILED and a failure report', async () => {
    const id = await processed(h, 'preprocessing_failed');
    await h.sandbox.advance(MINUTE);
    expect(await historyOf(h, id)).toEqual([
      'PENDING',
      'RECEIVED',
      'QUEUED',
      'ELIGIBILITY_CHECK_RUNNING',
      'QC_PASSED',
      'PREPROCESSING',
      'PREPROCESSING_FAILED',
    ]);
    const r = await get('/failure-report', { order_id: id, report_type: 'JSON' });
    expect(r.json).toMatchObject({
      status: 'PREPROCESSING_FAILED',
      reason: expect.stringMatching(/preprocessing failed/),
    });
  });

  it('blocks on manual review (IN_REVIEW) before delivery', async () => {
    const id = await processed(h, 'in_review');
    await h.sandbox.advance(10 * SECOND);
    expect(await statusOf(h, id)).toBe('IN_REVIEW');
    expect((await get('/results', { order_id: id, report_type: 'PDF' })).status).toBe(409);
    const bypass = await h.call('PATCH', '/qc-bypass', { token: t, query: { order_id: id } });
    expect(bypass.status).toBe(409); // manual review restrictions still apply
    await h.sandbox.advance(MINUTE);
    expect(await statusOf(h, id)).toBe('DELIVERED');
  });

  it('expires a delivered order; its results can then no longer be retrieved', async () => {
    const id = await processed(h, 'expired');
    await h.sandbox.advance(10 * SECOND);
    expect(await statusOf(h, id)).toBe('DELIVERED');
    await h.sandbox.advance(MINUTE);
    expect(await statusOf(h, id)).toBe('EXPIRED');
    const r = await get('/results', { order_id: id, report_type: 'PDF' });
    expect(r.status).toBe(409);
    expect(r.json.message).toMatch(/expired/);
  });

  it('rejects at QC with QC_FAILED, no failure report, and a QC report with X-QC-Round', async () => {
    const id = await processed(h, 'qc_failed');
    const tooEarly = await get('/qc-report', { order_id: id, report_type: 'results' });
    expect(tooEarly.status).toBe(404);
    await h.sandbox.advance(MINUTE);
    expect(await statusOf(h, id)).toBe('QC_FAILED');
    const failure = await get('/failure-report', { order_id: id, report_type: 'PDF' });
    expect(failure.status).toBe(404);
    expect(failure.json.message).toMatch(/QC rejections produce no failure report/);
    const qc = await get('/qc-report', { order_id: id, report_type: 'results', round: 'latest' });
    expect(qc.status).toBe(200);
    expect(qc.headers.get('x-qc-round')).toBe('original');
    expect(qc.json).toMatchObject({ order_id: id, round: 'original', verdict: 'failed' });
    expect(
      (qc.json.checks as { name: string; result: string }[]).find((c) => c.name === 'motion')!
        .result,
    ).toBe('fail');
    const info = await get('/qc-report', {
      order_id: id,
      report_type: 'additional_info',
      round: 'original',
    });
    expect(info.json.acquisition).toMatchObject({
      modality: 'MR',
      rows: 32,
      columns: 32,
      slice_thickness_mm: 1,
      magnetic_field_strength_t: 3,
    });
    const corrected = await get('/qc-report', {
      order_id: id,
      report_type: 'results',
      round: 'corrected',
    });
    expect(corrected.status).toBe(404);
    expect((await get('/qc-report', { order_id: id, report_type: 'summary' })).status).toBe(400);
    expect(
      (await get('/qc-report', { order_id: id, report_type: 'results', round: 'second' })).status,
    ).toBe(400);
    expect((await get('/qc-report', { study_uid: '1.2.3', report_type: 'results' })).status).toBe(
      400,
    );
    // Still active: a bypass is possible.
    const list = (await h.call('GET', '/list-orders', { token: t })).json.orders as {
      order_id: string;
    }[];
    expect(list.map((o) => o.order_id)).toContain(id);
  });

  it('bypasses QC: request (with reason), withdraw while pending, request again, then QC_BYPASS → … → DELIVERED with a corrected round', async () => {
    const id = await processed(h, 'qc_failed');
    await h.sandbox.advance(MINUTE);
    const first = await h.call('PATCH', '/qc-bypass', {
      token: t,
      query: { order_id: id },
      json: { reason: 'motion acceptable for volumetry per neuroradiologist' },
    });
    expect(first.status).toBe(200);
    expect(first.json).toMatchObject({ order_id: id, bypass_requested: true, status: 'QC_FAILED' });
    const withdrawn = await h.call('PATCH', '/qc-bypass', {
      token: t,
      query: { order_id: id },
      json: { withdraw: true },
    });
    expect(withdrawn.json.bypass_requested).toBe(false);
    await h.sandbox.advance(MINUTE);
    expect(await statusOf(h, id)).toBe('QC_FAILED');
    const noReason = await h.call('PATCH', '/qc-bypass', { token: t, query: { order_id: id } });
    expect(noReason.status).toBe(200);
    expect(noReason.json.bypass_requested).toBe(true);
    await h.sandbox.advance(MINUTE);
    expect(await historyOf(h, id)).toEqual([
      'PENDING',
      'RECEIVED',
      'QUEUED',
      'ELIGIBILITY_CHECK_RUNNING',
      'QC_FAILED',
      'QC_BYPASS',
      'PREPROCESSING',
      'ANALYSIS_RUNNING',
      'DELIVERED',
    ]);
    const latest = await get('/qc-report', { order_id: id, report_type: 'results' });
    expect(latest.headers.get('x-qc-round')).toBe('corrected');
    expect(latest.json.verdict).toBe('bypassed');
    const original = await get('/qc-report', {
      order_id: id,
      report_type: 'results',
      round: 'original',
    });
    expect(original.headers.get('x-qc-round')).toBe('original');
    expect(original.json.verdict).toBe('failed');
    const results = await get('/results', { order_id: id, report_type: 'JSON' });
    expect(results.json).toMatchObject({
      qc_bypassed: true,
      caveat: expect.stringMatching(/bypassed/),
    });
    const late = await h.call('PATCH', '/qc-bypass', {
      token: t,
      query: { order_id: id },
      json: { withdraw: true },
    });
    expect(late.status).toBe(409);
  });

  it('qc_bypass_refused: QC_FAILED like qc_failed, but the bypass is refused 403 qc_bypass_restricted and nothing is recorded', async () => {
    const id = await processed(h, 'qc_bypass_refused');
    await h.sandbox.advance(MINUTE);
    expect(await statusOf(h, id)).toBe('QC_FAILED');
    const refused = await h.call('PATCH', '/qc-bypass', {
      token: t,
      query: { order_id: id },
      json: { reason: 'please bypass' },
    });
    expect(refused.status).toBe(403);
    expect(refused.json).toMatchObject({
      error: 'qc_bypass_restricted',
      message: expect.stringMatching(/manual review restrictions/),
    });
    await h.sandbox.advance(MINUTE);
    expect(await statusOf(h, id)).toBe('QC_FAILED');
    // Nothing pending: there is nothing to withdraw either.
    const withdraw = await h.call('PATCH', '/qc-bypass', {
      token: t,
      query: { order_id: id },
      json: { withdraw: true },
    });
    expect(withdraw.status).toBe(409);
    // Still bypassable in time (listed as active); only the bypass itself is forbidden.
    const list = (await h.call('GET', '/list-orders', { token: t })).json.orders as {
      order_id: string;
    }[];
    expect(list.map((o) => o.order_id)).toContain(id);
  });

  it('invalid_study: the completed upload is refused 400 invalid_study naming every file, and the order stays PENDING', async () => {
    const id = await newOrder(h, { sandbox_outcome: 'invalid_study', patient_id: 'SBX-INV' });
    const zip = await zipStudy(createMrBrainSeries({ series: { slices: 3 } }));
    const r = await putObject(await singlePutUrl(h, id), zip);
    expect(r.status).toBe(400);
    expect(r.json.error).toBe('invalid_study');
    const files = r.json.files as { file: string; reason: string }[];
    expect(new Set(files.map((f) => f.file)).size).toBe(3);
    expect(files.every((f) => /^DICOM\/S\w+\/IM000[123]\.dcm$/.test(f.file))).toBe(true);
    expect(files).toHaveLength(3);
    expect(files.every((f) => /incomplete uncompressed pixel data/.test(f.reason))).toBe(true);
    expect(await statusOf(h, id)).toBe('PENDING');
  });

  it('unknown_status: an active order shows a status value the contract does not name, then goes on to DELIVERED', async () => {
    const id = await processed(h, 'unknown_status');
    const seen: string[] = [];
    for (let i = 0; i < 40 && seen.at(-1) !== 'DELIVERED'; i++) {
      await h.sandbox.advance(1 * SECOND);
      const listed = (
        (await h.call('GET', '/list-orders', { token: t })).json.orders as {
          order_id: string;
          status: string;
        }[]
      ).find((o) => o.order_id === id);
      const s = listed?.status ?? (await statusOf(h, id));
      if (s !== seen.at(-1)) seen.push(s);
    }
    expect(seen).toContain('VENDOR_REVIEW_HOLD');
    expect(seen.slice(seen.indexOf('VENDOR_REVIEW_HOLD'))).toEqual([
      'VENDOR_REVIEW_HOLD',
      'QC_PASSED',
      'PREPROCESSING',
      'ANALYSIS_RUNNING',
      'DELIVERED',
    ]);
  });

  it('refuses a bad bypass body and a bypass of an order that did not fail QC', async () => {
    const id = await processed(h, 'qc_failed');
    await h.sandbox.advance(MINUTE);
    const wrongType = await h.call('PATCH', '/qc-bypass', {
      token: t,
      query: { order_id: id },
      body: 'reason',
      headers: { 'content-type': 'text/plain' },
    });
    expect(wrongType.status).toBe(415);
    const badReason = await h.call('PATCH', '/qc-bypass', {
      token: t,
      query: { order_id: id },
      json: { reason: 42 },
    });
    expect(badReason.status).toBe(400);
    const other = await newOrder(h);
    const notFailed = await h.call('PATCH', '/qc-bypass', { token: t, query: { order_id: other } });
    expect(notFailed.status).toBe(409);
    expect(notFailed.json.error).toBe('qc_bypass_not_allowed');
  });

  it('makes QC_FAILED final once the bypass window has passed', async () => {
    const id = await processed(h, 'qc_failed');
    await h.sandbox.advance(MINUTE);
    await h.sandbox.advance(7 * 24 * 3600 * SECOND);
    t = await h.token();
    const r = await h.call('PATCH', '/qc-bypass', { token: t, query: { order_id: id } });
    expect(r.status).toBe(409);
    const list = (await h.call('GET', '/list-orders', { token: t })).json.orders as {
      order_id: string;
    }[];
    expect(list.map((o) => o.order_id)).not.toContain(id);
    expect(
      (await h.call('PATCH', '/cancel-order', { token: t, query: { order_id: id } })).status,
    ).toBe(409);
  });

  it('stops processing for good when cancelled mid-way', async () => {
    const id = await processed(h, 'delivered');
    await h.sandbox.advance(3 * SECOND);
    await h.call('PATCH', '/cancel-order', { token: t, query: { order_id: id } });
    await h.sandbox.advance(MINUTE);
    expect(await statusOf(h, id)).toBe('CANCELLED');
    expect((await get('/results', { order_id: id, report_type: 'PDF' })).status).toBe(409);
  });
});

describe('sandbox: step times follow SANDBOX_TIME_SCALE on the real clock', () => {
  it('delivers within a fraction of a second at time scale 0.01', async () => {
    const h = await startHarness({ clock: 'real', timeScale: 0.01 });
    try {
      const id = await processed(h, 'delivered');
      const deadline = Date.now() + 5000;
      let status = await statusOf(h, id);
      while (status !== 'DELIVERED' && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        status = await statusOf(h, id);
      }
      expect(status).toBe('DELIVERED');
    } finally {
      await h.close();
    }
  });
});
