import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { startAdapter, type RunningAdapter } from '../../src/bootstrap';
import { MllpClient } from '../../src/hl7';
import { TEST_TOKENS } from '../helpers/adapter';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import { ackSummary, hl7Fixture, withControlId } from '../helpers/hl7-fixtures';
import { mkdirSync, rmSync } from 'node:fs';
import { launchChromium } from '../helpers/chromium';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;
type Role = keyof typeof TEST_TOKENS;

/**
 * Reprocess (issue #18 item 5), real adapter on real PostgreSQL: a message refused for an
 * unknown procedure code, the site's mapping changed (the adapter restarted with a CONFIG_FILE
 * that maps the code), reprocessed once into one order; a second reprocess creates nothing.
 */
describe('POST /api/audit/messages/{id}/reprocess', () => {
  let db: TestDatabase;
  let adapter: RunningAdapter | undefined;
  const dataDir = mkdtempSync(join(tmpdir(), 'reprocess-'));

  const start = async (configFile?: string) => {
    adapter = await startAdapter({
      env: {
        PATH: process.env.PATH,
        DATABASE_URL: db.url,
        HTTP_PORT: '0',
        HTTP_HOST: '127.0.0.1',
        MLLP_PORT: '0',
        MLLP_HOST: '127.0.0.1',
        DATA_DIR: dataDir,
        JOBS_ENABLED: 'false',
        POLL_INTERVAL_SECONDS: '300',
        API_TOKENS: Object.entries(TEST_TOKENS)
          .map(([role, token]) => `${role}:${token}`)
          .join(','),
        ...(configFile ? { CONFIG_FILE: configFile } : {}),
      },
      logger: pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }),
      announce: () => undefined,
    });
    return adapter;
  };
  const post = async (path: string, body: unknown, role: Role = 'admin') => {
    const res = await fetch(`${adapter!.httpUrl}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_TOKENS[role]}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? (JSON.parse(text) as Json) : undefined };
  };
  /** Restarts the adapter with a site file that maps the local `code` (the site's fix). */
  const restartMapping = async (code: string) => {
    await adapter!.close();
    adapter = undefined;
    const dir = mkdtempSync(join(tmpdir(), 'reprocess-site-'));
    const site = join(dir, 'site.yaml');
    writeFileSync(
      site,
      `mappings:\n  productTableMode: extend\n  productTable:\n    - code: USABD\n      products: [abdomen-us]\n    - code: ${code}\n      products: [lung-nodule-ct]\n`,
    );
    await start(site);
  };
  const count = async (sql: string): Promise<number> =>
    ((await adapter!.dataSource.query(sql)) as Array<{ n: number }>)[0]!.n;

  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await adapter?.close();
    await db?.drop();
  });

  it('refused (AE), mapping changed, reprocessed into one order exactly once; accepted → 409; analyst → 403; reason required', async () => {
    // 1. refused: USABD is in no product table
    await start();
    const client = new MllpClient({
      host: '127.0.0.1',
      port: adapter!.mllpPort,
      responseTimeoutMs: 10_000,
    });
    let ack: Buffer;
    try {
      ack = await client.send(hl7Fixture('orm-o01-v231-unknown-procedure'));
      // a second refused message, reprocessed from the page below
      const other = await client.send(
        withControlId(hl7Fixture('orm-o01-v231-unknown-procedure'), 'REPROCESS-PAGE-1'),
      );
      expect(ackSummary(other).code).toBe('AE');
    } finally {
      await client.close();
    }
    expect(ackSummary(ack).code).toBe('AE');
    const [refused] = await adapter!.dataSource.query(
      `SELECT id, outcome FROM inbound_messages WHERE message_control_id = 'MSGID20240322080000'`,
    );
    expect(refused.outcome).toBe('rejected');
    expect(await count(`SELECT count(*)::int AS n FROM orders`)).toBe(0);

    // still refused while the mapping is unchanged: nothing created, the refusal answered
    const early = await post(`/api/audit/messages/${refused.id}/reprocess`, { reason: 'try it' });
    expect(early.status).toBe(200);
    expect(early.body.answer.code).toBe('AE');
    expect(early.body.reprocessedMessageId).toBeNull();
    expect(await count(`SELECT count(*)::int AS n FROM orders`)).toBe(0);
    await adapter!.close();
    adapter = undefined;

    // 2. the site's mapping now maps USABD
    const dir = mkdtempSync(join(tmpdir(), 'reprocess-site-'));
    const site = join(dir, 'site.yaml');
    writeFileSync(
      site,
      'mappings:\n  productTableMode: extend\n  productTable:\n    - code: USABD\n      products: [abdomen-us]\n      note: US Abdomen complete\n',
    );
    await start(site);

    // roles and reason
    expect(
      (
        await post(
          `/api/audit/messages/${refused.id}/reprocess`,
          { reason: 'mapping fixed' },
          'analyst',
        )
      ).status,
    ).toBe(403);
    const noReason = await post(`/api/audit/messages/${refused.id}/reprocess`, {});
    expect(noReason.status).toBe(400);
    expect(await count(`SELECT count(*)::int AS n FROM orders`)).toBe(0);

    // 3. reprocess: the order it would have produced
    const first = await post(`/api/audit/messages/${refused.id}/reprocess`, {
      reason: 'USABD mapped to abdomen-us (ticket 42)',
    });
    expect(first.status).toBe(200);
    expect(first.body.answer.code).toBe('AA');
    expect(first.body.duplicate).toBe(false);
    expect(first.body.idempotencyKey).toBe(`reprocess:${refused.id}`);
    expect(first.body.reprocessedMessageId).toEqual(expect.any(String));
    expect(first.body.orderIds).toHaveLength(1);
    const orders = await adapter!.dataSource.query(
      `SELECT id, accession_number AS accession, request FROM orders`,
    );
    expect(orders).toHaveLength(1);
    expect(orders[0].id).toBe(first.body.orderIds[0]);
    expect(orders[0].accession).toBe('ACC-20240322-0007');
    expect(orders[0].request.products).toEqual(['abdomen-us']);

    // 4. a second reprocess: the first answer, nothing created
    const second = await post(`/api/audit/messages/${refused.id}/reprocess`, { reason: 'again' });
    expect(second.status).toBe(200);
    expect(second.body.duplicate).toBe(true);
    expect(second.body.answer.code).toBe('AA');
    expect(second.body.reprocessedMessageId).toBe(first.body.reprocessedMessageId);
    expect(second.body.orderIds).toEqual(first.body.orderIds);
    expect(await count(`SELECT count(*)::int AS n FROM orders`)).toBe(1);

    // audited with actor and reason; the new message links to the original
    const events = await adapter!.dataSource.query(
      `SELECT inbound_message_id, actor, detail FROM audit_events WHERE kind = 'message.reprocessed' ORDER BY id`,
    );
    const onOriginal = events.filter((e: Json) => e.inbound_message_id === refused.id);
    expect(onOriginal).toHaveLength(3);
    expect(onOriginal[1].actor).toMatch(/^admin/);
    expect(onOriginal[1].detail.reason).toBe('USABD mapped to abdomen-us (ticket 42)');
    const onNew = events.filter(
      (e: Json) => e.inbound_message_id === first.body.reprocessedMessageId,
    );
    expect(onNew).toHaveLength(1);
    expect(onNew[0].detail.originalMessageId).toBe(refused.id);

    // 5. an accepted message cannot be reprocessed
    const accepted = await post(
      `/api/audit/messages/${first.body.reprocessedMessageId}/reprocess`,
      {
        reason: 'should be refused',
      },
    );
    expect(accepted.status).toBe(409);
    expect(await count(`SELECT count(*)::int AS n FROM orders`)).toBe(1);
  });

  it('the message page has a Reprocess button (admin, CSRF form) that leads to the new message (Chromium)', async () => {
    const artifacts = join(__dirname, '..', '..', 'test-artifacts', 'reprocess');
    mkdirSync(artifacts, { recursive: true });
    const [refused] = await adapter!.dataSource.query(
      `SELECT id FROM inbound_messages WHERE message_control_id = 'REPROCESS-PAGE-1'`,
    );
    const userDataDir = mkdtempSync(join(tmpdir(), 'reprocess-chromium-'));
    const context = await launchChromium(userDataDir);
    try {
      const page = context.pages()[0] ?? (await context.newPage());
      await page.goto(`${adapter!.httpUrl}/audit`);
      await page.getByLabel('API token').fill(TEST_TOKENS.admin);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.waitForURL(/\/audit/);
      await page.goto(`${adapter!.httpUrl}/audit/messages/${refused.id}`);
      await page.getByLabel('Reason to reprocess').fill('USABD is mapped now');
      await page.screenshot({ path: join(artifacts, 'message-refused.png'), fullPage: true });
      await page.getByRole('button', { name: 'Reprocess' }).click();
      await page.waitForURL((url) => !url.pathname.endsWith(refused.id));
      expect(await page.getByText(`Reprocess of ${refused.id}`).count()).toBe(1);
      await page.screenshot({ path: join(artifacts, 'message-reprocessed.png'), fullPage: true });
      // accepted now: no button
      expect(await page.getByRole('button', { name: 'Reprocess' }).count()).toBe(0);
      const orders = await adapter!.dataSource.query(
        `SELECT count(*)::int AS n FROM orders WHERE placer_order_number = 'PLC-100412'`,
      );
      // the placer number is the same as the first message's: the intake knows the order
      expect(orders[0].n).toBe(1);
    } finally {
      await context.close();
      rmSync(userDataDir, { recursive: true, force: true });
    }
  });

  it('a FHIR ServiceRequest refused for its code (422) is reprocessed through the create operation, once', async () => {
    const di = JSON.parse(
      readFileSync(
        join(__dirname, '..', 'fixtures', 'fhir', 'r4-servicerequest-example-di.json'),
        'utf8',
      ),
    );
    const patient = JSON.parse(
      readFileSync(
        join(__dirname, '..', 'fixtures', 'fhir', 'r4-patient-example-dicom.json'),
        'utf8',
      ),
    );
    const sr = {
      ...di,
      code: { coding: [{ system: 'http://loinc.org', code: 'LOCAL-9' }], text: 'local code' },
      contained: [{ ...patient, id: 'p1' }],
      identifier: [{ system: 'http://example.org/ehr/orders', value: 'REPRO-FHIR-1' }],
      subject: { reference: '#p1' },
      requester: { display: 'Dr. Adam Careful' },
    };
    const res = await fetch(`${adapter!.httpUrl}/fhir/ServiceRequest`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
        accept: 'application/fhir+json',
      },
      body: JSON.stringify(sr),
    });
    expect(res.status).toBe(422);
    const [refused] = await adapter!.dataSource.query(
      `SELECT id, outcome FROM inbound_messages WHERE transport = 'fhir-rest' ORDER BY received_at DESC LIMIT 1`,
    );
    expect(refused.outcome).not.toBe('accepted');
    // the site maps LOCAL-9 from now on
    await restartMapping('LOCAL-9');
    const before = await count(`SELECT count(*)::int AS n FROM orders`);
    const first = await post(`/api/audit/messages/${refused.id}/reprocess`, {
      reason: 'LOCAL-9 mapped',
    });
    expect(first.status).toBe(200);
    expect(first.body.answer.code).toBe('201');
    expect(first.body.orderIds).toHaveLength(1);
    const second = await post(`/api/audit/messages/${refused.id}/reprocess`, {
      reason: 'LOCAL-9 mapped',
    });
    expect(second.body.duplicate).toBe(true);
    expect(second.body.answer.code).toBe('201');
    expect(await count(`SELECT count(*)::int AS n FROM orders`)).toBe(before + 1);
    const [order] = await adapter!.dataSource.query(
      `SELECT placer_order_number AS placer FROM orders WHERE id = $1`,
      [first.body.orderIds[0]],
    );
    expect(order.placer).toBe('REPRO-FHIR-1');
  });
  it('a refused conditional create is reprocessed as a conditional create: the order made since under its If-None-Exist is the answer (200), no second order', async () => {
    const fixture = (name: string) =>
      JSON.parse(readFileSync(join(__dirname, '..', 'fixtures', 'fhir', `${name}.json`), 'utf8'));
    const placer = { system: 'http://example.org/ehr/orders', value: 'REPRO-COND-1' };
    const sr = (code: string) => ({
      ...fixture('r4-servicerequest-example-di'),
      code: { coding: [{ system: 'http://loinc.org', code }] },
      contained: [{ ...fixture('r4-patient-example-dicom'), id: 'p1' }],
      identifier: [placer],
      subject: { reference: '#p1' },
      requester: { display: 'Dr. Adam Careful' },
    });
    const create = (body: unknown) =>
      fetch(`${adapter!.httpUrl}/fhir/ServiceRequest`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TEST_TOKENS.sender}`,
          'content-type': 'application/fhir+json',
          'if-none-exist': `identifier=${placer.system}|${placer.value}`,
        },
        body: JSON.stringify(body),
      });
    // refused for a local code the site does not map yet
    expect((await create(sr('LOCAL-10'))).status).toBe(422);
    const [refused] = await adapter!.dataSource.query(
      `SELECT id FROM inbound_messages WHERE transport = 'fhir-rest' AND outcome = 'rejected' ORDER BY received_at DESC LIMIT 1`,
    );
    // the sender sent it again with a LOINC code, as a conditional create: ordered
    const made = await create(sr('24627-2'));
    expect(made.status).toBe(201);
    const orderId = ((await made.json()) as { id: string }).id;
    await restartMapping('LOCAL-10');
    const before = await count(`SELECT count(*)::int AS n FROM orders`);
    const again = await post(`/api/audit/messages/${refused.id}/reprocess`, {
      reason: 'LOCAL-10 mapped',
    });
    expect(again.status).toBe(200);
    // R4 http.html#ccreate: one match, 200 with it. Before, the header was dropped and the
    // stored body ran as a plain create of another content under that placer number (409).
    expect(again.body.answer.code).toBe('200');
    expect(JSON.parse(again.body.answer.body).id).toBe(orderId);
    expect(await count(`SELECT count(*)::int AS n FROM orders`)).toBe(before);
  });
});
