import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { createMrBrainStudy } from '../helpers/dicom-factory';
import { multipartRelated } from '../studies/study-test-support';

jest.setTimeout(120_000);

/**
 * Request bodies that stop arriving, on a running adapter over real sockets: a few bytes and then
 * nothing (HTTP_BODY_STALL_SECONDS), and a body that keeps moving slowly, which is not cut.
 */
interface Exchange {
  answer: string;
  closed: boolean;
  ms: number;
}

/**
 * Sends `head`, then `pieces` one every `everyMs`, then waits (for at most `waitMs`) for the
 * server to answer and close the connection.
 */
async function exchange(
  url: string,
  head: string,
  pieces: Buffer[],
  options: { everyMs?: number; waitMs: number },
): Promise<Exchange> {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  let answer = '';
  let closed = false;
  socket.on('data', (c: Buffer) => (answer += c.toString('latin1')));
  socket.on('close', () => (closed = true));
  socket.on('error', () => undefined);
  await new Promise((r) => socket.once('connect', r));
  const started = Date.now();
  socket.write(head);
  for (const piece of pieces) {
    if (closed) break;
    socket.write(piece);
    if (options.everyMs) await sleep(options.everyMs);
  }
  while (!closed && Date.now() - started < options.waitMs) await sleep(50);
  socket.destroy();
  return { answer, closed, ms: Date.now() - started };
}

function bodyOf(answer: string): string {
  const at = answer.indexOf('\r\n\r\n');
  return at < 0 ? '' : answer.slice(at + 4);
}

/** A FHIR ServiceRequest of a few KB. */
const SERVICE_REQUEST = readFileSync(
  join(__dirname, '..', 'fixtures', 'fhir', 'r4-servicerequest-example-di.json'),
);

/** A request's line and headers (Host, the bearer `token`, then `headers`), to the blank line. */
function head(requestLine: string, token: string, ...headers: string[]): string {
  return [requestLine, 'Host: adapter', `Authorization: Bearer ${token}`, ...headers, '', ''].join(
    '\r\n',
  );
}

/** POST /fhir/ServiceRequest declaring `length` bytes. */
const fhirHead = (length: number | string) =>
  head(
    'POST /fhir/ServiceRequest HTTP/1.1',
    TEST_TOKENS.sender,
    'Content-Type: application/fhir+json',
    `Content-Length: ${length}`,
  );

/** An /api cancel (JSON body) declaring `length` bytes. */
const cancelHead = (length: number | string) =>
  head(
    'POST /api/orders/00000000-0000-4000-8000-000000000000/cancel HTTP/1.1',
    TEST_TOKENS.admin,
    'Content-Type: application/json',
    `Content-Length: ${length}`,
  );

/** A STOW-RS push of `contentType`, then `headers` (how its length is given). */
const stowHead = (contentType: string, ...headers: string[]) =>
  head(
    'POST /dicomweb/studies HTTP/1.1',
    TEST_TOKENS.sender,
    `Content-Type: ${contentType}`,
    'Accept: application/dicom+json',
    ...headers,
  );

describe('request bodies that stall (HTTP_BODY_STALL_SECONDS)', () => {
  let adapter: TestAdapter;

  beforeAll(async () => {
    adapter = await startTestAdapter({
      HTTP_BODY_STALL_SECONDS: '2',
      STUDY_QUIET_PERIOD_SECONDS: '60',
      DATA_DIR_MIN_FREE_BYTES: '1',
    });
  });
  afterAll(async () => {
    await adapter?.close();
  });

  /** The inbound message kept last. */
  const lastInbound = async () =>
    (
      await adapter.dataSource.query<
        Array<{ outcome: string; response_code: string; raw: Buffer }>
      >(
        `SELECT outcome, response_code, raw FROM inbound_messages ORDER BY received_at DESC LIMIT 1`,
      )
    )[0]!;

  it('a FHIR ServiceRequest that stops after its first bytes: 408 OperationOutcome, closed, its head kept', async () => {
    // Before: no answer within 10 s; Node held it until its 300 s request timeout.
    const sent = SERVICE_REQUEST.subarray(0, 300);
    const res = await exchange(adapter.httpUrl, fhirHead(SERVICE_REQUEST.length), [sent], {
      waitMs: 10_000,
    });
    expect(res.answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(res.closed).toBe(true);
    expect(res.ms).toBeLessThan(6_000);
    const outcome = JSON.parse(bodyOf(res.answer)) as {
      resourceType: string;
      issue: Array<{ code: string; diagnostics: string }>;
    };
    expect(outcome.resourceType).toBe('OperationOutcome');
    expect(outcome.issue[0]).toMatchObject({
      code: 'timeout',
      diagnostics: expect.stringContaining('HTTP_BODY_STALL_SECONDS'),
    });
    const kept = await lastInbound();
    expect(kept).toMatchObject({ outcome: 'rejected', response_code: '408' });
    expect(kept.raw.equals(sent)).toBe(true);
  });

  it('a STOW-RS push (chunked) that stops inside its first instance: 408 problem JSON, closed', async () => {
    const [instance] = createMrBrainStudy();
    const { body, contentType } = multipartRelated([{ data: instance!.bytes }]);
    const piece = body.subarray(0, 4096);
    const res = await exchange(
      adapter.httpUrl,
      stowHead(contentType, 'Transfer-Encoding: chunked'),
      [
        Buffer.concat([
          Buffer.from(`${piece.length.toString(16)}\r\n`),
          piece,
          Buffer.from('\r\n'),
        ]),
      ],
      { waitMs: 10_000 },
    );
    expect(res.answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(res.answer).toMatch(/content-type: application\/problem\+json/i);
    expect(res.closed).toBe(true);
    expect(res.ms).toBeLessThan(6_000);
    expect(JSON.parse(bodyOf(res.answer))).toMatchObject({
      status: 408,
      detail: expect.stringContaining('HTTP_BODY_STALL_SECONDS'),
    });
  });

  it('an /api JSON body that stops half-way: 408 problem JSON, closed', async () => {
    const json = JSON.stringify({ reason: 'patient refused the examination' });
    const res = await exchange(
      adapter.httpUrl,
      cancelHead(json.length),
      [Buffer.from(json.slice(0, 12))],
      { waitMs: 10_000 },
    );
    expect(res.answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(res.closed).toBe(true);
    expect(JSON.parse(bodyOf(res.answer))).toMatchObject({ status: 408 });
  });

  it('a declared Content-Length far past the limit (10 GB) is 413 at once and closed, FHIR (kept) and /api alike', async () => {
    // Before: no answer while the 10 GB did not come (then 408 at the stall); a sender sending
    // them had them read and dropped to the end before hearing 413.
    const sent = SERVICE_REQUEST.subarray(0, 300);
    const fhir = await exchange(adapter.httpUrl, fhirHead('10000000000'), [sent], {
      waitMs: 10_000,
    });
    expect(fhir.answer).toMatch(/^HTTP\/1\.1 413 /);
    expect(fhir.closed).toBe(true);
    expect(fhir.ms).toBeLessThan(1_500);
    expect(JSON.parse(bodyOf(fhir.answer))).toMatchObject({ resourceType: 'OperationOutcome' });
    const kept = await lastInbound();
    expect(kept).toMatchObject({ outcome: 'rejected', response_code: '413' });
    expect(sent.subarray(0, kept.raw.length).equals(kept.raw)).toBe(true);

    const api = await exchange(
      adapter.httpUrl,
      cancelHead('10000000000'),
      [Buffer.from('{"reason":"')],
      { waitMs: 10_000 },
    );
    expect(api.answer).toMatch(/^HTTP\/1\.1 413 /);
    expect(api.closed).toBe(true);
    expect(api.ms).toBeLessThan(1_500);
    expect(JSON.parse(bodyOf(api.answer))).toMatchObject({ status: 413 });
  });

  it('a FHIR body dripping a byte every second (never a stall) is 408 once it falls under the minimum rate, closed', async () => {
    // Before: a byte just under every HTTP_BODY_STALL_SECONDS kept the request (and its slot
    // among HTTP_MAX_CONNECTIONS_PER_CLIENT) open for as long as the sender liked.
    const drip = Array.from({ length: 30 }, (_, i) => SERVICE_REQUEST.subarray(i, i + 1));
    const res = await exchange(adapter.httpUrl, fhirHead(SERVICE_REQUEST.length), drip, {
      everyMs: 1_000,
      waitMs: 20_000,
    });
    expect(res.answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(res.closed).toBe(true);
    expect(res.ms).toBeLessThan(15_000);
    const outcome = JSON.parse(bodyOf(res.answer)) as {
      issue: Array<{ code: string; diagnostics: string }>;
    };
    expect(outcome.issue[0]).toMatchObject({
      code: 'timeout',
      diagnostics: expect.stringContaining('HTTP_BODY_MIN_BYTES_PER_SECOND'),
    });
  });

  it('a STOW-RS push moving slowly but steadily for several stall periods is received whole', async () => {
    // The bound is on silence and on a rate far below any real link (HTTP_BODY_MIN_BYTES_PER_SECOND
    // at its default, 1024), not on the whole request: 7.5 s of a body moving every 300 ms
    // (3.75 stall periods, about 3.5 KB/s) is answered 200 like any push.
    const instances = createMrBrainStudy();
    const { body, contentType } = multipartRelated(instances.map((i) => ({ data: i.bytes })));
    const pieces: Buffer[] = [];
    const size = Math.ceil(body.length / 25);
    for (let at = 0; at < body.length; at += size) pieces.push(body.subarray(at, at + size));
    const res = await exchange(
      adapter.httpUrl,
      stowHead(contentType, `Content-Length: ${body.length}`, 'Connection: close'),
      pieces,
      { everyMs: 300, waitMs: 30_000 },
    );
    expect(res.ms).toBeGreaterThan(7_000);
    expect(res.answer).toMatch(/^HTTP\/1\.1 200 /);
    for (const instance of instances) expect(bodyOf(res.answer)).toContain(instance.sopInstanceUid);
  });
});
