import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { parse as parseYaml } from 'yaml';
import { MllpClient } from '../../src/hl7';
import { ackSummary } from '../helpers/hl7-fixtures';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../src/persistence/embedded-postgres';
import { TEST_TOKENS } from '../helpers/adapter';
import { spawnAdapter, waitHealthy, type AdapterProcess } from '../helpers/adapter-process';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import { startTcpProxy } from '../helpers/tcp-proxy';
import {
  newOrderSpec,
  ormMessage,
  SANDBOX_CLIENT,
  studyFor,
  waitFor,
  writeSiteConfig,
} from '../e2e/e2e-support';
import { multipartRelated } from '../studies/study-test-support';

jest.setTimeout(120_000);

/**
 * The adapter as an operator runs it (its own OS process, `src/main.ts`): configuration an
 * operator gets wrong, and the machine around it failing. A start-up refusal is one line per
 * problem naming the variable, exit code 2, and never shows a secret.
 */

const API_TOKENS = Object.entries(TEST_TOKENS)
  .map(([role, token]) => `${role}:${token}`)
  .join(',');

async function refusal(
  env: Record<string, string>,
): Promise<{ code: number | null; lines: string[] }> {
  const proc = spawnAdapter({
    DATABASE_URL: 'postgres://postgres@127.0.0.1:1/never-reached',
    HTTP_PORT: '0',
    MLLP_PORT: '0',
    HTTP_HOST: '127.0.0.1',
    MLLP_HOST: '127.0.0.1',
    API_TOKENS,
    DATA_DIR: mkdtempSync(join(tmpdir(), 'ops-data-')),
    ...env,
  });
  const { code } = await proc.exited;
  return { code, lines: proc.output().split('\n').filter(Boolean) };
}

describe('operations: a mistaken configuration fails the start with one line per problem', () => {
  it('never prints the password of a URL it refuses, even one that does not parse', async () => {
    const { code, lines } = await refusal({
      // a port out of range: the URL does not parse, so it cannot be masked as a URL
      DATABASE_URL: 'postgres://adapter:Pa55w0rd-from-vault@db.hospital.local:65536/adapter',
      IMAGING_BASE_URL: 'https://client:upstream-s3cret@api.imaging.example/v1',
    });
    expect(code).toBe(2);
    expect(lines).toEqual([
      expect.stringMatching(/^imaging-ai-adapter: DATABASE_URL: must be a URL .*adapter:\*\*\*\*@/),
      expect.stringMatching(
        /^imaging-ai-adapter: IMAGING_BASE_URL: must not carry user information \(credentials go in IMAGING_CLIENT_ID/,
      ),
    ]);
    expect(lines.join('\n')).not.toMatch(/Pa55w0rd|upstream-s3cret/);
  });

  it('never prints a password given as a DATABASE_URL query parameter (libpq ?password=)', async () => {
    const { code, lines } = await refusal({
      LOG_LEVEL: 'info',
      DATABASE_URL:
        'postgres://adapter@127.0.0.1:1/adapter?sslmode=disable&password=Pa55w0rd-in-query&sslpassword=key-pa55',
    });
    expect(code).toBe(2);
    const output = lines.join('\n');
    expect(output).toMatch(
      /DATABASE_URL: cannot connect to postgres:\/\/adapter@127\.0\.0\.1:1\/adapter\?sslmode=disable&password=\*\*\*\*&sslpassword=\*\*\*\*/,
    );
    expect(output).not.toMatch(/Pa55w0rd-in-query|key-pa55/);
  });

  it('refuses a peer base with a query or fragment, which every call would drop', async () => {
    const { code, lines } = await refusal({
      FHIR_SERVER_URL: 'https://ehr.hospital.local/fhir/R4#ServiceRequest',
      DICOMWEB_URL: 'https://pacs.hospital.local/dicom-web?aet=AIADAPTER',
    });
    expect(code).toBe(2);
    expect(lines.sort()).toEqual([
      expect.stringMatching(/^imaging-ai-adapter: DICOMWEB_URL: must be a base URL without/),
      expect.stringMatching(/^imaging-ai-adapter: FHIR_SERVER_URL: must be a base URL without/),
    ]);
  });

  it('refuses one token under two roles, without printing it', async () => {
    const { code, lines } = await refusal({
      API_TOKENS: 'sender:ris-shared-token-0123456789,admin:ris-shared-token-0123456789',
    });
    expect(code).toBe(2);
    expect(lines).toEqual([
      'imaging-ai-adapter: API_TOKENS: the sender and admin tokens are the same; each role needs its own token',
    ]);
  });

  it('names the variable of a file that is missing or not a file, before any slow step', async () => {
    const started = Date.now();
    const { code, lines } = await refusal({
      MLLP_TLS_CERT_FILE: 'certs/mllp.crt',
      MLLP_TLS_KEY_FILE: tmpdir(),
      FHIR_SERVER_URL: 'https://ehr.hospital.local/fhir',
      FHIR_SMART_CLIENT_ID: 'imaging-ai-adapter',
      FHIR_SMART_PRIVATE_KEY_FILE: '/run/secrets/smart-key.pem',
    });
    expect(code).toBe(2);
    expect(lines.sort()).toEqual([
      'imaging-ai-adapter: FHIR_SMART_PRIVATE_KEY_FILE: cannot read /run/secrets/smart-key.pem: no such file',
      `imaging-ai-adapter: MLLP_TLS_CERT_FILE: cannot read certs/mllp.crt (relative to ${process.cwd()}: ${join(process.cwd(), 'certs/mllp.crt')}): no such file`,
      `imaging-ai-adapter: MLLP_TLS_KEY_FILE: ${tmpdir()} is not a file`,
    ]);
    // refused with the configuration, not after connecting to the (unreachable) database
    expect(Date.now() - started).toBeLessThan(30_000);
  });

  it('names a certificate or key file that holds the wrong thing', async () => {
    // two throw-away self-signed pairs (system openssl), and a file that is not PEM at all
    const dir = mkdtempSync(join(tmpdir(), 'ops-pem-'));
    for (const n of ['a', 'b'])
      execFileSync(
        'openssl',
        ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', `/CN=${n}`].concat(
          ['-keyout', join(dir, `${n}.key`), '-out', join(dir, `${n}.crt`)],
        ),
        { stdio: 'ignore' },
      );
    writeFileSync(join(dir, 'notes.txt'), 'ask the PKI team for the real certificate\n');
    const { code, lines } = await refusal({
      MLLP_TLS_CERT_FILE: join(dir, 'a.crt'),
      MLLP_TLS_KEY_FILE: join(dir, 'b.key'),
      RIS_MLLP_TLS_CA_FILE: join(dir, 'notes.txt'),
      FHIR_SERVER_URL: 'https://ehr.hospital.local/fhir',
      FHIR_SMART_CLIENT_ID: 'imaging-ai-adapter',
      FHIR_SMART_PRIVATE_KEY_FILE: join(dir, 'a.key'),
      FHIR_SMART_ALG: 'ES384',
    });
    expect(code).toBe(2);
    expect(lines.sort()).toEqual([
      `imaging-ai-adapter: FHIR_SMART_PRIVATE_KEY_FILE: ${join(dir, 'a.key')} holds an rsa key; FHIR_SMART_ALG=ES384 needs an ec key`,
      `imaging-ai-adapter: MLLP_TLS_KEY_FILE: ${join(dir, 'b.key')} does not match MLLP_TLS_CERT_FILE`,
      `imaging-ai-adapter: RIS_MLLP_TLS_CA_FILE: ${join(dir, 'notes.txt')} holds no PEM certificate`,
    ]);
  });

  it('refuses two of its own listeners on one port, rather than blaming another process', async () => {
    const { code, lines } = await refusal({
      HTTP_PORT: '2575',
      MLLP_PORT: '2575',
      MLLP_HOST: '0.0.0.0',
    });
    expect(code).toBe(2);
    expect(lines).toEqual([
      'imaging-ai-adapter: HTTP_PORT / MLLP_PORT: both 2575; each listener needs its own port',
    ]);
  });

  it('refuses a DATA_DIR it cannot write, instead of answering every pushed study 500', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ops-file-'));
    writeFileSync(join(dir, 'volume'), 'not a directory');
    const { code, lines } = await refusal({ DATA_DIR: join(dir, 'volume', 'adapter') });
    expect(code).toBe(2);
    expect(lines).toEqual([
      `imaging-ai-adapter: DATA_DIR: cannot write ${join(dir, 'volume', 'adapter')}: ENOTDIR (a part of the path is a file)`,
    ]);
  });
});

describe('operations: the adapter process on a real database', () => {
  let db: TestDatabase;
  let proc: AdapterProcess | undefined;
  const mounted: string[] = [];
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterEach(async () => {
    if (proc && proc.child.exitCode === null) {
      proc.child.kill('SIGTERM');
      await proc.exited;
    }
    proc = undefined;
  });
  afterAll(async () => {
    for (const dir of mounted) execFileSync('umount', [dir]);
    await db?.drop();
  });

  async function start(env: Record<string, string>): Promise<string> {
    const httpPort = await freePort();
    proc = spawnAdapter({
      DATABASE_URL: db.url,
      HTTP_PORT: String(httpPort),
      HTTP_HOST: '127.0.0.1',
      MLLP_PORT: String(await freePort()),
      MLLP_HOST: '127.0.0.1',
      API_TOKENS,
      DATA_DIR: mkdtempSync(join(tmpdir(), 'ops-data-')),
      ...env,
    });
    const url = `http://127.0.0.1:${httpPort}`;
    await waitHealthy(url, 90_000, proc);
    return url;
  }

  it('takes values as a Kubernetes secret leaves them, with a trailing newline', async () => {
    const url = await start({
      API_TOKENS: `${API_TOKENS}\n`,
      JOBS_ENABLED: 'false\n',
      OUTBOUND_ENABLED: ' false ',
      LOG_LEVEL: 'warn\n',
    });
    const res = await fetch(`${url}/metrics`, {
      headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
    });
    expect(res.status).toBe(200);
  });

  it('answers a pushed study 503 with Retry-After when DATA_DIR is full, and keeps no partial file', async () => {
    const small = mkdtempSync(join(tmpdir(), 'ops-small-'));
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', small], { stdio: 'ignore' });
    } catch {
      console.warn('cannot mount a small tmpfs here (not root?): the full-disk case is not run');
      return;
    }
    mounted.push(small);
    // a study waiting for its order takes most of the room
    mkdirSync(join(small, 'data'));
    const url = await start({
      DATA_DIR: join(small, 'data'),
      IMAGING_BASE_URL: 'http://127.0.0.1:1/v1',
      ...SANDBOX_CLIENT,
    });
    const push = async () => {
      const spec = newOrderSpec();
      const { body, contentType } = multipartRelated(
        studyFor({ ...spec, slices: 12, rows: 128 }).map((i) => ({ data: i.bytes })),
      );
      return fetch(`${url}/dicomweb/studies`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TEST_TOKENS.sender}`, 'content-type': contentType },
        body,
      });
    };
    let answer: Response | undefined;
    for (let i = 0; i < 6; i++) {
      answer = await push();
      if (answer.status !== 200) break;
    }
    expect(answer!.status).toBe(503);
    expect(answer!.headers.get('retry-after')).toBe('60');
    expect(((await answer!.json()) as { detail: string }).detail).toMatch(/DATA_DIR\) is full/);
    const left = execFileSync('find', [small, '-name', '*.part']).toString().trim();
    expect(left).toBe('');
    expect(proc!.output()).toMatch(/"code":"ENOSPC"/);
  });

  it('says storage is read-only on /health and /metrics when DATA_DIR is remounted read-only', async () => {
    const disk = mkdtempSync(join(tmpdir(), 'ops-ro-'));
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=16m', 'tmpfs', disk], { stdio: 'ignore' });
    } catch {
      console.warn('cannot mount a tmpfs here (not root?): the read-only case is not run');
      return;
    }
    mounted.push(disk);
    mkdirSync(join(disk, 'data'));
    const url = await start({ DATA_DIR: join(disk, 'data'), DATA_DIR_MIN_FREE_BYTES: '1' });
    const health = async () =>
      (await (await fetch(`${url}/health`)).json()) as {
        status: string;
        checks: { storage: { status: string; detail?: string } };
      };
    expect((await health()).checks.storage.status).toBe('up');
    // as the kernel does after an I/O error on a filesystem mounted errors=remount-ro
    execFileSync('mount', ['-o', 'remount,ro', disk]);
    const answer = await health();
    expect(answer.status).toBe('degraded');
    expect(answer.checks.storage).toMatchObject({
      status: 'read-only',
      detail: expect.stringMatching(/DATA_DIR cannot be written \(EROFS\)/),
    });
    const metrics = await (
      await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` } })
    ).text();
    expect(metrics).toMatch(/^adapter_dependency_up\{dependency="storage"\} 0$/m);
    execFileSync('mount', ['-o', 'remount,rw', disk]);
    expect((await health()).checks.storage.status).toBe('up');
  });
});

describe('operations: /health and /metrics tell the truth while PostgreSQL is unreachable', () => {
  let db: TestDatabase;
  let proc: AdapterProcess | undefined;
  afterAll(async () => {
    if (proc && proc.child.exitCode === null) {
      proc.child.kill('SIGTERM');
      await proc.exited;
    }
    await db?.drop();
  });

  it('a scrape that succeeds during the outage says the database is down, and up again after', async () => {
    db = await createTestDatabase();
    const target = new URL(db.url);
    const proxy = await startTcpProxy(target.hostname, Number(target.port || 5432));
    target.port = String(proxy.port);
    const httpPort = await freePort();
    const url = `http://127.0.0.1:${httpPort}`;
    proc = spawnAdapter({
      DATABASE_URL: target.toString(),
      HTTP_PORT: String(httpPort),
      HTTP_HOST: '127.0.0.1',
      MLLP_PORT: String(await freePort()),
      MLLP_HOST: '127.0.0.1',
      API_TOKENS,
      DATA_DIR: mkdtempSync(join(tmpdir(), 'ops-data-')),
    });
    try {
      await waitHealthy(url, 90_000, proc);
      const databaseUp = async () => {
        const res = await fetch(`${url}/metrics`, {
          headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
        });
        expect(res.status).toBe(200);
        const line = (await res.text()).match(
          /^adapter_dependency_up\{dependency="database"\} (\d)$/m,
        );
        return line?.[1];
      };
      expect(await databaseUp()).toBe('1');

      proxy.cut();
      const health = await fetch(`${url}/health`);
      expect(health.status).toBe(503);
      expect(
        ((await health.json()) as { checks: { database: { status: string } } }).checks.database
          .status,
      ).toBe('down');
      // the scrape itself succeeds (Prometheus' `up` stays 1): only this gauge can tell
      expect(await databaseUp()).toBe('0');

      proxy.restore();
      await waitFor(
        'the database up again in /metrics',
        async () => (await databaseUp()) === '1',
        30_000,
        500,
      );
    } finally {
      await proxy.close();
    }
  });
});

describe('operations: shutdown while an upstream call hangs', () => {
  it('ends within its own bound, and the compose file gives it that long before SIGKILL', async () => {
    // an upstream that accepts connections and never answers: the place job's call hangs
    const held: Socket[] = [];
    const upstream = createServer((socket) => {
      held.push(socket);
      socket.on('error', () => undefined);
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    const db = await createTestDatabase();
    const dir = mkdtempSync(join(tmpdir(), 'ops-hang-'));
    const mllpPort = await freePort();
    const httpPort = await freePort();
    const proc = spawnAdapter({
      DATABASE_URL: db.url,
      HTTP_PORT: String(httpPort),
      HTTP_HOST: '127.0.0.1',
      MLLP_PORT: String(mllpPort),
      MLLP_HOST: '127.0.0.1',
      API_TOKENS,
      DATA_DIR: join(dir, 'data'),
      CONFIG_FILE: writeSiteConfig(dir),
      IMAGING_BASE_URL: `http://127.0.0.1:${(upstream.address() as { port: number }).port}/v1`,
      ...SANDBOX_CLIENT,
      LOG_LEVEL: 'info',
    });
    try {
      await waitHealthy(`http://127.0.0.1:${httpPort}`, 90_000, proc);
      const mllp = new MllpClient({ host: '127.0.0.1', port: mllpPort });
      expect(ackSummary(await mllp.send(ormMessage(newOrderSpec()))).code).toBe('AA');
      await mllp.close();
      await waitFor('the place job calling the upstream', async () => held.length >= 2, 30_000);
      const signalled = Date.now();
      proc.child.kill('SIGTERM');
      await proc.exited;
      const shutdownMs = Date.now() - signalled;
      expect(shutdownMs).toBeLessThan(25_000);
      const grace = (
        parseYaml(readFileSync('docker/compose.yaml', 'utf8')) as {
          services: { adapter: { stop_grace_period?: string } };
        }
      ).services.adapter.stop_grace_period;
      // docker's default is 10 s: a SIGKILL before the adapter's own bound cuts every job
      const graceMs = grace ? Number(/^(\d+)s$/.exec(grace)?.[1]) * 1000 : 10_000;
      expect(graceMs).toBeGreaterThan(shutdownMs + 2_000);
      expect(proc.output()).toMatch(/imaging-ai-adapter stopped/);
    } finally {
      if (proc.child.exitCode === null) proc.child.kill('SIGKILL');
      for (const s of held) s.destroy();
      upstream.close();
      await db.drop();
    }
  });
});
