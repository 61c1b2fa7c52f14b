import { mkdtempSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { startAdapter, type RunningAdapter } from '../../src/bootstrap';
import { createLogger } from '../../src/observability/logger';
import { TEST_TOKENS } from '../helpers/adapter';
import { createTestDatabase, type TestDatabase } from '../helpers/database';

jest.setTimeout(60_000);

/**
 * A client that hangs up in the middle of its request body (an EHR's own timeout, a proxy
 * restarting) is the client's doing: the service log says so at info, not as an error with a
 * stack trace that an operator's error alerting would page for.
 */
describe('hostile: a client hanging up in the middle of its request', () => {
  let db: TestDatabase;
  let adapter: RunningAdapter;
  let logs = '';

  beforeAll(async () => {
    db = await createTestDatabase();
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        logs += chunk.toString();
        done();
      },
    });
    adapter = await startAdapter({
      env: {
        PATH: process.env.PATH,
        DATABASE_URL: db.url,
        HTTP_PORT: '0',
        HTTP_HOST: '127.0.0.1',
        MLLP_PORT: '0',
        MLLP_HOST: '127.0.0.1',
        DATA_DIR: mkdtempSync(join(tmpdir(), 'abort-data-')),
        API_TOKENS: Object.entries(TEST_TOKENS)
          .map(([role, token]) => `${role}:${token}`)
          .join(','),
      },
      logger: createLogger('info', sink),
      announce: () => undefined,
    });
  });
  afterAll(async () => {
    await adapter?.close();
    await db?.drop();
  });

  async function abortAfterPartOfTheBody(path: string, contentType: string): Promise<void> {
    const { port } = new URL(adapter.httpUrl);
    const socket = connect(Number(port), '127.0.0.1');
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.write(
      `POST ${path} HTTP/1.1\r\nHost: adapter\r\nAuthorization: Bearer ${TEST_TOKENS.sender}\r\n` +
        `Content-Type: ${contentType}\r\nContent-Length: 100000\r\n\r\n{"resourceType":"ServiceRequest",`,
    );
    await sleep(300);
    socket.destroy();
    await sleep(500);
  }

  it('a FHIR POST whose body stops half-way is logged at info as the client closing, no error line', async () => {
    logs = '';
    await abortAfterPartOfTheBody('/fhir/ServiceRequest', 'application/fhir+json');
    const lines = logs
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { level: number; msg: string; path?: string });
    expect(lines.filter((l) => l.level >= 50)).toEqual([]);
    expect(lines).toContainEqual(
      expect.objectContaining({
        level: 30,
        msg: 'the client closed the connection before its request was read',
        path: '/fhir/ServiceRequest',
      }),
    );
    // the front door is still answering
    const res = await fetch(`${adapter.httpUrl}/fhir/metadata`);
    expect(res.status).toBe(200);
  });

  it('so is a STOW-RS push whose body stops half-way', async () => {
    logs = '';
    await abortAfterPartOfTheBody(
      '/dicomweb/studies',
      'multipart/related; type="application/dicom"; boundary=B',
    );
    const lines = logs
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { level: number; msg: string; path?: string });
    expect(lines.filter((l) => l.level >= 50)).toEqual([]);
  });
});
