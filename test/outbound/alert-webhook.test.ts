import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { ConfigError, describeConfig, loadConfig } from '../../src/config/app-config';
import { createLogger } from '../../src/observability/logger';
import { AlertWebhookPublisher } from '../../src/outbound/alert-webhook.publisher';
import { OutboxOrderEvents } from '../../src/outbound/outbox-order-events';
import { OutboxWorker } from '../../src/outbound/outbox.worker';
import { DESTINATIONS } from '../../src/outbound/outbound.settings';
import type { DeliveryResult, Publisher } from '../../src/outbound/publisher';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import { playStatus, seedOrder, testOutboundSettings } from './outbound-seed';

jest.setTimeout(60_000);

/** The secret part of the webhook URL: it must never show up in a log, an answer or the audit log. */
const SECRET = 'T0KEN-in-the-path-s3cr3t';

interface Hook {
  server: Server;
  url: string;
  bodies: Array<Record<string, unknown>>;
  paths: string[];
  /** Answers, in order; the last one repeats. */
  answers: number[];
}

async function startHook(answers: number[]): Promise<Hook> {
  const hook: Hook = {
    server: undefined as unknown as Server,
    url: '',
    bodies: [],
    paths: [],
    answers,
  };
  hook.server = createServer((req: IncomingMessage, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      hook.paths.push(req.url ?? '');
      if (req.url?.startsWith('/elsewhere')) {
        res.end();
        return;
      }
      hook.bodies.push(JSON.parse(body) as Record<string, unknown>);
      const status = hook.answers.length > 1 ? hook.answers.shift()! : hook.answers[0]!;
      if (status >= 300 && status < 400) res.setHeader('location', '/elsewhere');
      res.statusCode = status;
      res.end();
    });
  });
  await new Promise<void>((r) => hook.server.listen(0, '127.0.0.1', r));
  hook.url = `http://127.0.0.1:${(hook.server.address() as AddressInfo).port}/hooks/${SECRET}?team=imaging`;
  return hook;
}

/** A results publisher whose peer refuses everything: its rows become dead letters. */
const refusingEhr: Publisher = {
  destination: DESTINATIONS.fhir,
  deliver: (): Promise<DeliveryResult> =>
    Promise.resolve({
      outcome: 'dead',
      answer: 'HTTP 422 (refused by the EHR)',
      detail: { status: 422 },
    }),
  close: () => Promise.resolve(),
};

describe('alert webhook (ALERT_WEBHOOK_URL) through the outbox, against a real loopback server', () => {
  let db: TestDatabase;
  let log = '';
  const logger = createLogger(
    'debug',
    new Writable({
      write(chunk: Buffer, _e, done) {
        log += chunk.toString();
        done();
      },
    }),
  );
  const settings = testOutboundSettings({
    destinations: [DESTINATIONS.fhir, DESTINATIONS.alert],
    maxAttempts: 3,
  });
  const events = new OutboxOrderEvents(settings);
  const workers: OutboxWorker[] = [];
  const hooks: Hook[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await Promise.all(workers.map((w) => w.stop()));
    for (const h of hooks) {
      h.server.closeAllConnections();
      h.server.close();
    }
    await db?.drop();
  });

  const run = (publishers: Publisher[]) => {
    const w = new OutboxWorker({
      dataSource: db.dataSource,
      settings,
      publishers,
      logger,
      pollMs: 30,
      concurrency: 2,
    });
    w.start();
    workers.push(w);
    return w;
  };
  const alertRows = async (orderId: string) =>
    (await db.dataSource.query(
      `SELECT kind, status, attempts, last_error FROM outbox WHERE order_id = $1 AND destination = 'alert-webhook' ORDER BY id`,
      [orderId],
    )) as Array<{ kind: string; status: string; attempts: number; last_error: string | null }>;
  const until = async (check: () => Promise<boolean>) => {
    const started = Date.now();
    while (Date.now() - started < 20_000) {
      if (await check()) return;
      await sleep(50);
    }
    throw new Error('timed out');
  };

  it('an order alert is POSTed as JSON; after a 500 it is retried and delivered', async () => {
    const hook = await startHook([500, 200]);
    hooks.push(hook);
    const order = await seedOrder(db.dataSource);
    await db.dataSource.transaction((manager) =>
      events.endedLocally(manager, {
        order: order.snapshot,
        state: 'failed',
        reason: 'the study did not arrive within 1440 minutes',
        alert: 'study-deadline',
      }),
    );
    const worker = run([new AlertWebhookPublisher({ url: hook.url })]);
    await until(async () => (await alertRows(order.id))[0]?.status === 'delivered');
    await worker.stop();
    expect(await alertRows(order.id)).toEqual([
      expect.objectContaining({ kind: 'order-alert', status: 'delivered', attempts: 2 }),
    ]);
    expect(hook.bodies).toHaveLength(2);
    expect(hook.bodies[1]).toMatchObject({
      source: 'imaging-ai-adapter',
      kind: 'order-alert',
      orderId: order.id,
      alert: 'study-deadline',
      state: 'failed',
      auditPath: `/audit/orders/${order.id}`,
    });
    expect(hook.paths[0]).toBe(`/hooks/${SECRET}?team=imaging`);
  });

  it("another destination's dead letter is alerted; the webhook's own dead letter is visible and alerted no further", async () => {
    const hook = await startHook([503]);
    hooks.push(hook);
    const order = await seedOrder(db.dataSource);
    await playStatus(db.dataSource, events, order, 'ANALYSIS_RUNNING'); // a Task row for the EHR
    const worker = run([refusingEhr, new AlertWebhookPublisher({ url: hook.url })]);
    await until(async () => (await alertRows(order.id))[0]?.status === 'dead');
    await worker.stop();
    const rows = await alertRows(order.id);
    expect(rows).toEqual([
      expect.objectContaining({ kind: 'dead-letter', status: 'dead', attempts: 3 }),
    ]);
    // (the first test's order had EHR rows too: they died here as well and were alerted)
    const mine = hook.bodies.filter((b) => b.orderId === order.id);
    expect(mine).toHaveLength(3); // three attempts, each a 503
    expect(mine[0]).toMatchObject({
      kind: 'dead-letter',
      orderId: order.id,
      deadLetter: { destination: 'ehr-fhir', documentKind: 'fhir-task' },
    });
    // on the audit page's dead letters, like any other
    const deadEvents = (await db.dataSource.query(
      `SELECT detail->>'destination' AS destination FROM audit_events
        WHERE kind = 'outbound.dead-letter' AND order_id = $1 ORDER BY id`,
      [order.id],
    )) as Array<{ destination: string }>;
    expect(deadEvents.map((e) => e.destination)).toEqual(['ehr-fhir', 'alert-webhook']);
  });

  // A replayed dead letter that fails again is a dead letter again: the analyst who replayed
  // it must hear so. The alert's dedupe key was the row id and attempt count, which a replay
  // resets: the second death (first attempt again) matched the first's key and no alert went out.
  it('a replayed dead letter that dies again is alerted again', async () => {
    const hook = await startHook([200]);
    hooks.push(hook);
    const order = await seedOrder(db.dataSource);
    await playStatus(db.dataSource, events, order, 'ANALYSIS_RUNNING'); // a Task row for the EHR
    const worker = run([refusingEhr, new AlertWebhookPublisher({ url: hook.url })]);
    const mine = () => hook.bodies.filter((b) => b.orderId === order.id);
    await until(() => Promise.resolve(mine().length === 1));
    const [task] = (await db.dataSource.query(
      `SELECT id::text AS id, attempts FROM outbox WHERE order_id = $1 AND destination = 'ehr-fhir'`,
      [order.id],
    )) as Array<{ id: string; attempts: number }>;
    expect(task!.attempts).toBe(1);
    // What POST /api/audit/dead-letters/{id}/replay does: pending, attempts reset, due now.
    await db.dataSource.query(
      `UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = now(), updated_at = now()
        WHERE id = $1`,
      [task!.id],
    );
    await until(() => Promise.resolve(mine().length === 2));
    await worker.stop();
    expect(mine().map((b) => (b.deadLetter as { outboxId: string }).outboxId)).toEqual([
      task!.id,
      task!.id,
    ]);
    expect((await alertRows(order.id)).map((r) => r.status)).toEqual(['delivered', 'delivered']);
  });

  it('a redirect is not followed: a dead letter naming the rule', async () => {
    const hook = await startHook([302]);
    hooks.push(hook);
    const order = await seedOrder(db.dataSource);
    await db.dataSource.transaction((manager) =>
      events.endedLocally(manager, {
        order: order.snapshot,
        state: 'failed',
        reason: 'upstream order stuck in PENDING for 72 hours',
        alert: 'upstream-stuck',
      }),
    );
    const worker = run([new AlertWebhookPublisher({ url: hook.url })]);
    await until(async () => (await alertRows(order.id))[0]?.status === 'dead');
    await worker.stop();
    expect((await alertRows(order.id))[0]!.last_error).toMatch(
      /HTTP 302: redirects are not followed/,
    );
    expect(hook.paths.filter((p) => p.startsWith('/elsewhere'))).toEqual([]);
  });

  it('the URL is never written: not to the log, the outbox answers or the audit log; config masks it', async () => {
    const stored =
      JSON.stringify(await db.dataSource.query(`SELECT last_error, payload FROM outbox`)) +
      JSON.stringify(await db.dataSource.query(`SELECT summary, detail FROM audit_events`));
    expect(log.length).toBeGreaterThan(0);
    expect(log).not.toContain(SECRET);
    expect(stored).not.toContain(SECRET);
    const hookUrl = `https://hooks.example/services/${SECRET}`;
    expect(
      JSON.stringify(describeConfig(loadConfig({ ALERT_WEBHOOK_URL: hookUrl }))),
    ).not.toContain(SECRET);
    expect(() =>
      loadConfig({ ALERT_WEBHOOK_URL: `https://user:${SECRET}@hooks.example/x` }),
    ).toThrow(ConfigError);
    try {
      loadConfig({ ALERT_WEBHOOK_URL: `https://user:${SECRET}@hooks.example/x` });
    } catch (e) {
      expect((e as ConfigError).problems.join('\n')).not.toContain(SECRET);
    }
  });
});
