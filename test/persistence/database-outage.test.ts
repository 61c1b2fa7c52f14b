import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'pg';
import { startAdapter, type RunningAdapter } from '../../src/bootstrap';
import { MllpClient } from '../../src/hl7';
import { createLogger } from '../../src/observability/logger';
import {
  freePort,
  startEmbeddedPostgres,
  type RunningEmbeddedPostgres,
} from '../../src/persistence/embedded-postgres';
import { TEST_TOKENS } from '../helpers/adapter';
import { ackSummary } from '../helpers/hl7-fixtures';
import {
  newOrderSpec,
  ormMessage,
  serviceRequestFor,
  writeSiteConfig,
  type Hl7OrderSpec,
} from '../e2e/e2e-support';

jest.setTimeout(180_000);

/**
 * The front doors while the database is down: the adapter (in this process) runs on an
 * embedded PostgreSQL of its own, which is stopped like a crash (immediate shutdown) and
 * started again on the same port. Nothing may be acknowledged that was not stored: MLLP
 * answers AR with ERR 207, FHIR 503 with a transient OperationOutcome and Retry-After; the
 * failed inserts leave no patient data in the log; once the database is back both accept
 * again without a restart, and the resent orders are stored once.
 */
describe('front doors during a database outage', () => {
  const dir = mkdtempSync(join(tmpdir(), 'db-outage-'));
  let pg: RunningEmbeddedPostgres | undefined;
  let port = 0;
  let adapter: RunningAdapter | undefined;
  let mllp: MllpClient | undefined;
  let logs = '';

  const startDatabase = () =>
    startEmbeddedPostgres({ dataDir: join(dir, 'pg'), port, database: 'adapter' });

  beforeAll(async () => {
    port = await freePort();
    pg = await startDatabase();
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        logs += chunk.toString();
        done();
      },
    });
    adapter = await startAdapter({
      env: {
        PATH: process.env.PATH,
        DATABASE_URL: pg.url,
        HTTP_PORT: '0',
        HTTP_HOST: '127.0.0.1',
        MLLP_PORT: '0',
        MLLP_HOST: '127.0.0.1',
        DATA_DIR: join(dir, 'data'),
        CONFIG_FILE: writeSiteConfig(dir),
        FHIR_UNKNOWN_PROCEDURE: 'default-products:neuro-volumetry',
        JOBS_ENABLED: 'false',
        POLL_INTERVAL_SECONDS: '300',
        API_TOKENS: Object.entries(TEST_TOKENS)
          .map(([role, token]) => `${role}:${token}`)
          .join(','),
      },
      logger: createLogger('info', sink),
      announce: () => undefined,
    });
    mllp = new MllpClient({ host: '127.0.0.1', port: adapter.mllpPort, responseTimeoutMs: 15_000 });
  });
  afterAll(async () => {
    await mllp?.close().catch(() => undefined);
    await adapter?.close();
    await pg?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const postFhir = async (spec: Hl7OrderSpec) => {
    const res = await fetch(`${adapter!.httpUrl}/fhir/ServiceRequest`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_TOKENS.sender}`,
        'content-type': 'application/fhir+json',
        'if-none-exist': `identifier=http://outage.example/ehr/orders|${spec.placer}`,
      },
      body: JSON.stringify(serviceRequestFor(spec, { identifierBase: 'http://outage.example' })),
      signal: AbortSignal.timeout(20_000),
    });
    return {
      status: res.status,
      retryAfter: res.headers.get('retry-after'),
      body: (await res.json()) as {
        resourceType: string;
        issue?: Array<{ severity: string; code: string }>;
      },
    };
  };
  const sendHl7 = async (spec: Hl7OrderSpec) => ackSummary(await mllp!.send(ormMessage(spec)));

  const ordersWithPlacer = async (placer: string): Promise<number> => {
    const c = new Client({ connectionString: pg!.url });
    await c.connect();
    try {
      const { rows } = await c.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM orders WHERE placer_order_number = $1`,
        [placer],
      );
      return rows[0]!.n;
    } finally {
      await c.end();
    }
  };

  it('refuses what it cannot store (AR 207, 503), logs no patient data, and accepts again once the database is back', async () => {
    const before = { hl7: newOrderSpec(), fhir: newOrderSpec() };
    expect((await sendHl7(before.hl7)).code).toBe('AA');
    expect((await postFhir(before.fhir)).status).toBe(201);

    const stopped = pg!;
    pg = undefined;
    await stopped.stop('immediate');

    const during = { hl7: newOrderSpec(), fhir: newOrderSpec() };
    const ack = await sendHl7(during.hl7);
    expect(ack.code).toBe('AR');
    expect(ack.errors.join('|')).toMatch(/\b207[&^]/);
    const refused = await postFhir(during.fhir);
    expect(refused.status).toBe(503);
    expect(refused.retryAfter).toBe('5');
    expect(refused.body.resourceType).toBe('OperationOutcome');
    expect(refused.body.issue?.[0]).toMatchObject({ severity: 'error', code: 'transient' });

    // Our own REST API too: 503 problem JSON, not 500.
    const api = await fetch(
      `${adapter!.httpUrl}/api/orders/${'0'.repeat(8)}-0000-7000-8000-${'0'.repeat(12)}`,
      {
        headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
      },
    );
    expect(api.status).toBe(503);
    expect(api.headers.get('retry-after')).toBe('5');
    expect(((await api.json()) as { title: string }).title).toBe('unavailable');

    // The failed inserts are logged (error, path), their parameters are not.
    expect(logs).toMatch(/could not be stored|FHIR request failed/);
    for (const spec of [during.hl7, during.fhir]) expect(logs).not.toContain(spec.patientId);
    expect(logs).not.toMatch(/MUSTERMANN|Mustermann|Lindenweg|19640812/);

    pg = await startDatabase();
    // Both front doors accept the resent orders by themselves (pools reconnect).
    const deadline = Date.now() + 30_000;
    let hl7 = '';
    let fhir = 0;
    while (Date.now() < deadline && (hl7 !== 'AA' || (fhir !== 201 && fhir !== 200))) {
      if (hl7 !== 'AA') hl7 = (await sendHl7(during.hl7).catch(() => undefined))?.code ?? '';
      if (fhir !== 201 && fhir !== 200) fhir = (await postFhir(during.fhir)).status;
      await sleep(250);
    }
    expect(hl7).toBe('AA');
    expect(fhir).toBe(201);
    for (const spec of [before.hl7, before.fhir, during.hl7, during.fhir])
      expect(await ordersWithPlacer(spec.placer)).toBe(1);
  });
});
