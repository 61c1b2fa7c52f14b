import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import type { BrowserContext, Page } from 'playwright-core';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { addDeadLetter, orderIdByAccession, SEEDED, sendFixtures } from './audit-seed';
import { launchChromium } from '../helpers/chromium';

/**
 * The analyst's workbench (issue #18 items 3, 6, 7, 10, 11) in real Chromium against the
 * running adapter: what an analyst must see, with screenshots in test-artifacts/workbench.
 */

const ARTIFACTS = join(__dirname, '..', '..', 'test-artifacts', 'workbench');
const FHIR_FIXTURES = join(__dirname, '..', 'fixtures', 'fhir');

describe('analyst workbench pages (headless Chromium)', () => {
  let adapter: TestAdapter;
  let db: Client;
  let context: BrowserContext;
  let page: Page;
  let userDataDir: string;
  let swfOrderId: string;
  let mrOrderId: string;
  let fhirOrderId: string;

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    adapter = await startTestAdapter();
    db = new Client({ connectionString: adapter.db.url });
    await db.connect();
    await sendFixtures(adapter);
    swfOrderId = await orderIdByAccession(db, SEEDED.swf.accession);
    await addDeadLetter(db, swfOrderId);
    mrOrderId = (
      await db.query<{ id: string }>(`SELECT id FROM orders WHERE placer_order_number = '556072'`)
    ).rows[0]!.id;
    const bundle = readFileSync(join(FHIR_FIXTURES, 'us-core-chest-ct-transaction.json'), 'utf8');
    const res = await fetch(`${adapter.httpUrl}/fhir`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
        accept: 'application/fhir+json',
      },
      body: bundle,
    });
    expect(res.status).toBe(200);
    fhirOrderId = (
      await db.query<{ id: string }>(`SELECT id FROM orders WHERE source = 'fhir' LIMIT 1`)
    ).rows[0]!.id;
    userDataDir = mkdtempSync(join(tmpdir(), 'workbench-chromium-'));
    context = await launchChromium(userDataDir);
    page = context.pages()[0] ?? (await context.newPage());
    await page.goto(`${adapter.httpUrl}/audit`);
    await page.getByLabel('API token').fill(TEST_TOKENS.analyst);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(/\/audit/);
  });

  afterAll(async () => {
    await context?.close();
    if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
    await db?.end();
    await adapter?.close();
  });

  const lineageCells = async (target: string): Promise<string[]> =>
    (
      await page
        .locator('table.lineage tbody tr', {
          has: page.locator('td:first-child span.mono', { hasText: new RegExp(`^${target}$`) }),
        })
        .first()
        .locator('td')
        .allInnerTexts()
    ).map((t) => t.trim());

  it('/audit opens on the dashboard; every number links to the filtered list (item 3)', async () => {
    await page.goto(`${adapter.httpUrl}/audit`);
    expect(await page.getByRole('heading', { name: /^Dashboard/, level: 1 }).count()).toBe(1);
    const { rows: truth } = await db.query<{ state: string; n: string }>(
      `SELECT state, count(*) AS n FROM orders GROUP BY state`,
    );
    const byState = page.locator('section[aria-labelledby="by-state"] tbody tr');
    expect(await byState.count()).toBe(truth.length);
    for (const t of truth) {
      const link = page.getByRole('link', { name: `${t.n} ${t.state}, last hour`, exact: true });
      expect(await link.count()).toBe(1);
    }
    // messages in (7 over MLLP, 1 FHIR transaction), the refused one, the dead letter
    expect(
      await page.getByRole('link', { name: '8 messages in, last hour', exact: true }).count(),
    ).toBe(1);
    expect(
      await page.getByRole('link', { name: '1 dead letters waiting for a replay' }).count(),
    ).toBe(1);
    expect(await page.locator('ol.bars').first().locator('li').count()).toBe(60);
    const waiting = page.locator('section[aria-labelledby="waiting-h"] tbody tr');
    expect(await waiting.count()).toBeGreaterThan(0);
    expect(await page.locator('.tile', { hasText: 'Upstream' }).innerText()).toMatch(
      /of 2000 calls\/min free/,
    );
    await page.screenshot({ path: join(ARTIFACTS, 'dashboard.png'), fullPage: true });

    // a state's count opens the order list filtered by that state and the window
    const first = truth.sort((a, b) => Number(b.n) - Number(a.n))[0]!;
    await page
      .getByRole('link', { name: `${first.n} ${first.state}, last hour`, exact: true })
      .click();
    await page.waitForURL(/\/audit\/orders\?state=/);
    expect(page.url()).toContain(`state=${encodeURIComponent(first.state)}`);
    expect(page.url()).toMatch(/from=\d{4}-\d\d-\d\dT\d\d%3A\d\d/);
    expect(await page.locator('main table tbody tr').count()).toBe(Number(first.n));

    // the refused count opens the message browser on the refused message, with why
    await page.goto(`${adapter.httpUrl}/audit`);
    await page.getByRole('link', { name: /refused messages, last day/ }).click();
    await page.waitForURL(/\/audit\/messages\?outcome=refused/);
    const refused = page.locator('main table tbody tr');
    expect(await refused.count()).toBe(1);
    const cells = (await refused.first().locator('td').allInnerTexts()).map((t) => t.trim());
    expect(cells[2]).toBe(SEEDED.rejectedMsh10);
    expect(cells[5]).toBe('rejected');
    expect(cells[7]).toMatch(/PID-3/);
    await page.screenshot({ path: join(ARTIFACTS, 'messages-refused.png'), fullPage: true });
  });

  it('the message browser filters by transport, answer code and text, each row linking to its page (item 10)', async () => {
    await page.goto(`${adapter.httpUrl}/audit/messages`);
    expect(await page.locator('main table tbody tr').count()).toBe(8);
    await page.getByLabel('Transport').selectOption('fhir-rest');
    await page.getByRole('button', { name: 'Search' }).click();
    await page.waitForURL(/transport=fhir-rest/);
    expect(await page.locator('main table tbody tr').count()).toBe(1);
    await page.goto(`${adapter.httpUrl}/audit/messages?answerCode=AA&text=zzz-not-there`);
    expect(await page.getByRole('heading', { name: 'No messages match' }).count()).toBe(1);
    await page.goto(`${adapter.httpUrl}/audit/messages?transport=mllp&answerCode=AA`);
    const rows = page.locator('main table tbody tr');
    const { rows: aa } = await db.query(
      `SELECT 1 FROM inbound_messages WHERE transport = 'mllp' AND response_code = 'AA'`,
    );
    expect(aa.length).toBeGreaterThan(3);
    expect(await rows.count()).toBe(aa.length);
    await rows.first().getByRole('link').click();
    await page.waitForURL(/\/audit\/messages\/[0-9a-f-]{36}$/);
    expect(await page.getByRole('heading', { name: /^Inbound message / }).count()).toBe(1);
  });

  it('an order waiting for its study says so, with since and deadline, on the list and in its timeline (item 10)', async () => {
    await db.query(
      `UPDATE orders SET state = 'placed', placed_at = now() - interval '5 minutes',
              study_deadline_at = now() + interval '1 day' WHERE id = $1`,
      [swfOrderId],
    );
    await page.goto(`${adapter.httpUrl}/audit/orders?accession=${SEEDED.swf.accession}`);
    const waits = page.locator('main table tbody tr .waits');
    expect(await waits.innerText()).toMatch(
      /^waits for the study since \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ · deadline \d{4}-/,
    );
    await page.goto(`${adapter.httpUrl}/audit/orders/${swfOrderId}`);
    const now = page.locator('section[aria-labelledby="tl-h"] .waiting');
    expect(await now.innerText()).toMatch(/^Now: waits for the study since .* · deadline /);
    await page.screenshot({ path: join(ARTIFACTS, 'order-waiting.png'), fullPage: true });
  });

  it('errors only finds an order whose upstream order FAILED (item 10)', async () => {
    const { rows } = await db.query<{ id: string; accession_number: string }>(
      `UPDATE orders SET upstream_status = 'FAILED' WHERE placer_order_number = '556071'
       RETURNING id, accession_number`,
    );
    await page.goto(`${adapter.httpUrl}/audit/orders?errorsOnly=true`);
    const hrefs = await page
      .locator('main table tbody tr td:nth-child(2) a')
      .evaluateAll((as) => as.map((a) => a.getAttribute('href')));
    expect(hrefs).toContain(`/audit/orders/${rows[0]!.id}`);
  });

  it("shows each outbound document as sent, the peer's raw answer, the upstream reports, and names dead letters by accession (item 11)", async () => {
    const oru = [
      'MSH|^~\\&|AI_ADAPTER|HOSPA|RADIS1|IHEDEMO|20240318170000||ORU^R01^ORU_R01|IAA77|P|2.5.1',
      'PID|1||PAT-4711^^^HOSPA^MR||SCHMIDT^ANNA^MARIA^^^^L||19560214|F',
      'OBR|1|PLC-100234^RADIS1|FIL-55012^DSS_OF|24627-2^CT Chest^LN|||||||||||||ACC-20240318-0042||||||CT|F',
      'OBX|1|TX|LN-18782-3^Study observation^LN||No nodule above 6 mm||||||F',
    ].join('\r');
    const ack =
      'MSH|^~\\&|RADIS1|IHEDEMO|AI_ADAPTER|HOSPA|20240318170001||ACK^R01^ACK|R-1|P|2.5.1\rMSA|AR|IAA77|unknown patient\rERR|||207^Application internal error^HL70357|E';
    const report = {
      resourceType: 'DiagnosticReport',
      status: 'final',
      subject: { display: 'SCHMIDT, ANNA' },
      code: { coding: [{ system: 'http://loinc.org', code: '24627-2', display: 'CT Chest' }] },
    };
    const outcome = {
      resourceType: 'OperationOutcome',
      issue: [{ severity: 'error', code: 'processing', diagnostics: 'Subject not found' }],
    };
    const dump = [
      {
        tag: '(0008,0016)',
        keyword: 'SOPClassUID',
        vr: 'UI',
        depth: 0,
        value: '1.2.840.10008.5.1.4.1.1.88.34',
      },
      { tag: '(0010,0010)', keyword: 'PatientName', vr: 'PN', depth: 0, value: 'SCHMIDT^ANNA' },
      { tag: '(0040,A730)', keyword: 'ContentSequence', vr: 'SQ', depth: 0, value: '1 item(s)' },
      {
        tag: '(0040,A160)',
        keyword: 'TextValue',
        vr: 'UT',
        depth: 1,
        value: 'No nodule above 6 mm',
      },
    ];
    const insert = (destination: string, kind: string, status: string, x: unknown) =>
      db.query(
        `INSERT INTO outbox (order_id, destination, kind, dedupe_key, payload, status, attempts, last_error, last_exchange, updated_at)
         VALUES ($1, $2, $3, $4, '{}', $5, 1, $6, $7, now())`,
        [
          swfOrderId,
          destination,
          kind,
          `${kind}:${Date.now()}`,
          status,
          status === 'dead' ? `${kind} refused` : null,
          x,
        ],
      );
    await insert('ris-hl7', 'hl7-oru', 'dead', {
      attempt: 1,
      outcome: 'dead',
      sent: { contentType: 'application/hl7-v2', text: oru },
      answer: { contentType: 'application/hl7-v2', text: ack },
    });
    await insert('ehr-fhir', 'fhir-diagnostic-report', 'dead', {
      attempt: 1,
      outcome: 'dead',
      sent: { contentType: 'application/fhir+json', text: JSON.stringify(report) },
      answer: { status: 422, contentType: 'application/fhir+json', text: JSON.stringify(outcome) },
    });
    await insert('pacs-dicomweb', 'dicom-sr', 'delivered', {
      attempt: 1,
      outcome: 'delivered',
      sent: { contentType: 'application/x-dicom-tag-dump+json', text: JSON.stringify(dump) },
      answer: { status: 200, contentType: 'application/dicom+json', text: '{}' },
    });
    await db.query(
      `INSERT INTO order_documents (order_id, upstream_status, kind, report_type, content_type, body) VALUES
         ($1, 'FAILED', 'failure', 'JSON', 'application/json', $2),
         ($1, 'FAILED', 'failure', 'PDF', 'application/pdf', $3)`,
      [
        swfOrderId,
        Buffer.from(JSON.stringify({ status: 'FAILED', patient_name: 'SCHMIDT ANNA' })),
        Buffer.from('%PDF-1.4 fake'),
      ],
    );

    await page.goto(`${adapter.httpUrl}/audit/orders/${swfOrderId}`);
    const out = page.locator('section[aria-labelledby="out-h"]');
    const oruDoc = out.locator('.doc', { hasText: 'hl7-oru → ris-hl7' }).last();
    await oruDoc.getByText('as sent (HL7)').click();
    expect(await oruDoc.locator('.f[data-pos^="OBX-3 "]').first().getAttribute('data-pos')).toBe(
      'OBX-3 · Observation Identifier',
    );
    await oruDoc.getByText("the RIS's ACK").click();
    const msa1 = oruDoc.locator('.f[data-pos^="MSA-1 "]');
    expect(await msa1.textContent()).toBe('AR');
    expect(await msa1.getAttribute('data-pos')).toBe('MSA-1 · Acknowledgment Code');

    const drDoc = out.locator('.doc', { hasText: 'fhir-diagnostic-report → ehr-fhir' });
    await drDoc.getByText('as sent (JSON)').click();
    await drDoc.getByText("the EHR's answer (422)").click();
    const drText = await drDoc.innerText();
    expect(drText).toContain('"resourceType": "DiagnosticReport"');
    // the EHR's OperationOutcome: codes shown, its free text masked like any free text
    expect(drText).toContain('"code": "processing"');
    expect(drText).not.toContain('Subject not found');

    const srDoc = out.locator('.doc', { hasText: 'dicom-sr → pacs-dicomweb' });
    await srDoc.getByText('as sent (tag dump)').click();
    const srText = await srDoc.innerText();
    expect(srText).toContain('(0008,0016) UI SOPClassUID: 1.2.840.10008.5.1.4.1.1.88.34');
    expect(srText).toMatch(/\(0010,0010\) PN PatientName: S\*\*\*/);
    expect(srText).toContain('  (0040,A160) UT TextValue: ***');

    const main = await page.locator('main').innerText();
    for (const phi of ['SCHMIDT', 'No nodule above', '19560214']) expect(main).not.toContain(phi);
    await page.screenshot({ path: join(ARTIFACTS, 'outbound-exchanges.png'), fullPage: true });

    // the upstream's failure report: viewable masked, downloadable masked; the PDF only by an admin
    const reports = page.locator('section[aria-labelledby="docs-h"]');
    expect(await reports.locator('tbody tr').count()).toBe(2);
    await reports.locator('tr', { hasText: 'JSON' }).getByRole('link', { name: 'View' }).click();
    await page.waitForURL(/\/documents\/\d+$/);
    const shown = await page.locator('pre').innerText();
    expect(shown).toContain('"status": "FAILED"');
    expect(shown).not.toContain('SCHMIDT');
    const [download] = await Promise.all([
      page.waitForEvent('download'),
      page.getByRole('link', { name: 'Download (masked JSON)' }).click(),
    ]);
    expect(download.suggestedFilename()).toMatch(/^failure-report-failed-\d+\.masked\.json$/);
    await page.screenshot({ path: join(ARTIFACTS, 'failure-report.png'), fullPage: true });
    await page.goBack();
    await reports.locator('tr', { hasText: 'PDF' }).getByRole('link', { name: 'View' }).click();
    expect(await page.getByRole('status').innerText()).toContain('cannot be masked');

    // dead letters are named by accession and placer, not by internal ids
    await page.goto(`${adapter.httpUrl}/audit/dead-letters`);
    const heads = await page.locator('main thead th').allInnerTexts();
    expect(heads.slice(0, 2).map((t) => t.trim().toLowerCase())).toEqual(['accession', 'placer']);
    const first = (await page.locator('main tbody tr').first().locator('td').allInnerTexts()).map(
      (t) => t.trim(),
    );
    expect(first.slice(0, 2)).toEqual([SEEDED.swf.accession, SEEDED.swf.placer]);
    await page.screenshot({ path: join(ARTIFACTS, 'dead-letters.png'), fullPage: true });
  });

  it('the API masks what went out and came back; only an admin downloads an original report, audited (item 11)', async () => {
    const api = await fetch(`${adapter.httpUrl}/api/audit/orders/${swfOrderId}`, {
      headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
    });
    const body = (await api.json()) as { outbound: Array<{ lastExchange: unknown }> };
    const text = JSON.stringify(body.outbound.map((o) => o.lastExchange));
    expect(text).toContain('ORU^R01');
    expect(text).toContain('MSA|AR|IAA77');
    for (const phi of ['SCHMIDT', 'No nodule above', '19560214', 'PAT-4711']) {
      expect(text).not.toContain(phi);
    }

    const { rows } = await db.query<{ id: string }>(
      `SELECT id::text FROM order_documents WHERE order_id = $1 AND report_type = 'PDF'`,
      [swfOrderId],
    );
    const reason = 'ticket 4471: PDF for the clinician';
    const url = `${adapter.httpUrl}/audit/orders/${swfOrderId}/documents/${rows[0]!.id}`;
    // The reason travels in the POST body, never in a URL (access logs, proxies, history).
    const inUrl = await fetch(`${url}?reveal=true&reason=${encodeURIComponent(reason)}`, {
      headers: { authorization: `Bearer ${TEST_TOKENS.admin}` },
    });
    expect(inUrl.status).toBe(400);
    const post = (token: string) =>
      fetch(url, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ reveal: 'true', reason }),
      });
    const refused = await post(TEST_TOKENS.analyst);
    expect(refused.status).toBe(403);
    const res = await post(TEST_TOKENS.admin);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-disposition')).toMatch(
      /^attachment; filename="failure-report-failed-\d+\.pdf"$/,
    );
    expect(Buffer.from(await res.arrayBuffer()).toString()).toBe('%PDF-1.4 fake');
    const reveal = await db.query(
      `SELECT actor, detail->>'reason' AS reason FROM audit_events WHERE kind = 'phi.reveal' AND order_id = $1`,
      [swfOrderId],
    );
    expect(reveal.rows).toEqual([{ actor: expect.stringMatching(/^admin#/), reason }]);
  });

  it('lineage shows the product stored and the table row that chose it (item 6)', async () => {
    await page.goto(`${adapter.httpUrl}/audit/orders/${mrOrderId}`);
    expect(await lineageCells('products\\[0\\]')).toEqual([
      'products[0]\nhl7.order.products',
      'OBR[2]-4.1',
      'brain-mr-volumetry\nproduct-table: 24590-2^LN → brain-mr-volumetry',
    ]);
    expect(await lineageCells('action')).toEqual([
      'action\nhl7.order.action',
      'ORC[2]-1',
      'create\ntable 0119: NW → create',
    ]);
    // a PHI line: the stored value masked, the conversion named but its text hidden
    expect(await lineageCells('patient\\.birthDate')).toEqual([
      'patient.birthDate\nhl7.patient.birth-date',
      'PID-7',
      '1971-**-**\nHL7 DT: ***',
    ]);
    await page.screenshot({ path: join(ARTIFACTS, 'lineage-products.png'), fullPage: true });
  });

  it('FHIR source paths wrap between path steps, never letter by letter (item 7)', async () => {
    await page.goto(`${adapter.httpUrl}/audit/orders/${fhirOrderId}`);
    const cells = page.locator('table.lineage td.src');
    expect(await cells.count()).toBeGreaterThan(5);
    // every path step (between dots, brackets, slashes, spaces) stays on one line
    const broken = await cells.evaluateAll((tds) =>
      tds.flatMap((td) => {
        const out: string[] = [];
        // (the test compiles without the DOM lib: the page's document, typed as used here)
        const doc = (
          globalThis as unknown as {
            document: {
              createTreeWalker(
                root: unknown,
                show: number,
              ): { nextNode(): { textContent: string | null } | null };
              createRange(): {
                setStart(node: unknown, offset: number): void;
                setEnd(node: unknown, offset: number): void;
                getClientRects(): { length: number };
              };
            };
          }
        ).document;
        const walker = doc.createTreeWalker(td, 4 /* NodeFilter.SHOW_TEXT */);
        for (let n = walker.nextNode(); n; n = walker.nextNode()) {
          for (const m of (n.textContent ?? '').matchAll(/[^./\]\s]+/g)) {
            const range = doc.createRange();
            range.setStart(n, m.index);
            range.setEnd(n, m.index + m[0].length);
            if (range.getClientRects().length > 1) out.push(`${td.textContent} (${m[0]})`);
          }
        }
        return out;
      }),
    );
    await page.screenshot({ path: join(ARTIFACTS, 'fhir-lineage.png'), fullPage: true });
    expect(broken).toEqual([]);
  });

  it('says why nothing was sent, shows the ORU as HL7 text and masks raw free text (item 7)', async () => {
    await page.goto(`${adapter.httpUrl}/audit/orders/${mrOrderId}`);
    expect(await page.locator('section[aria-labelledby="out-h"]').innerText()).toContain(
      'Nothing sent: no outbound destination is configured',
    );

    await page.goto(`${adapter.httpUrl}/audit/orders/${swfOrderId}`);
    const out = page.locator('section[aria-labelledby="out-h"]');
    await out.getByText('as sent (HL7)').first().click();
    const obx = out.locator('.hl7 .f[data-pos^="OBX-3 "]').first();
    expect(await obx.getAttribute('data-pos')).toBe('OBX-3 · Observation Identifier');
    expect(await out.locator('.hl7 .f[data-pos^="PID-5 "]').first().textContent()).toBe(
      'S***^A***^M***^^^^L',
    );
    const main = await page.locator('main').innerText();
    for (const phi of ['Persistent cough', 'SCHMIDT', 'No nodule above']) {
      expect(main).not.toContain(phi);
    }
    await page.screenshot({ path: join(ARTIFACTS, 'outbound-as-sent.png'), fullPage: true });

    await page.goto(`${adapter.httpUrl}/audit/orders/${mrOrderId}`);
    const obr31 = page.locator('.hl7 .f[data-pos^="OBR-31 "]').last();
    expect(await obr31.textContent()).toBe('G43.909^***^I10'); // codes as in the mapped view
  });

  it('a failed order whose upstream order was cancelled does not read PENDING (item 7)', async () => {
    await db.query(
      `UPDATE orders SET state = 'failed', upstream_order_id = 'up-ended-1', upstream_status = 'PENDING',
         last_error = 'no usable study arrived within 240 minutes' WHERE id = $1`,
      [mrOrderId],
    );
    await db.query(
      `INSERT INTO audit_events (order_id, kind, severity, actor, summary, detail)
       VALUES ($1, 'upstream.call', 'info', 'adapter', 'PATCH /cancel-order → 200 in 12 ms', $2)`,
      [
        mrOrderId,
        {
          operation: 'cancel-order',
          method: 'PATCH',
          endpoint: '/cancel-order',
          status: 200,
          outcome: 'success',
        },
      ],
    );
    await page.goto(`${adapter.httpUrl}/audit/orders/${mrOrderId}`);
    const status = page.locator('dl.facts div', { hasText: 'Upstream status' }).locator('dd');
    expect(await status.innerText()).toMatch(/^CANCELLED \(cancelled by the adapter/);
  });

  it('the mapping tables page shows the outbound status table with its local-end rows (item 7)', async () => {
    await page.goto(`${adapter.httpUrl}/audit/mappings`);
    const table = page.locator('#outbound-status');
    expect(await table.getByRole('heading').innerText()).toContain('Upstream status →');
    for (const row of [
      'DELIVERED',
      'QC_FAILED_FINAL',
      'ENDED_LOCALLY_FAILED',
      'ENDED_LOCALLY_CANCELLED',
    ]) {
      expect(await table.locator('td', { hasText: new RegExp(`^${row}$`) }).count()).toBe(1);
    }
    const delivered = (
      await table
        .locator('tr', { has: page.locator('td', { hasText: /^DELIVERED$/ }) })
        .locator('td')
        .allInnerTexts()
    ).map((t) => t.trim());
    expect(delivered.slice(0, 6)).toEqual([
      'DELIVERED',
      'delivered (final)',
      'completed',
      'final',
      'RE / CM',
      'F / F',
    ]);
    await table.screenshot({ path: join(ARTIFACTS, 'outbound-status-table.png') });
  });
});
