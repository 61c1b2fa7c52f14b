import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'pg';
import { MllpClient, parseHl7 } from '../../src/hl7';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { seededRandom } from '../../src/common/seeded-random';

/**
 * Hostile input: seeded mutations of the real-world fixtures, sent over MLLP and to the FHIR
 * endpoint. The service stays up, answers every input with an acknowledgment (AA/AE/AR…) or
 * an HTTP status below 500, keeps every raw HL7 input, and its memory stays bounded.
 * FUZZ_LONG=1 runs the long version (30,000 HL7 and 10,000 FHIR inputs).
 */
const LONG = process.env.FUZZ_LONG === '1';
const HL7_COUNT = LONG ? 30_000 : 1_500;
const FHIR_COUNT = LONG ? 10_000 : 400;
const SEED = Number(process.env.FUZZ_SEED ?? 20261121);

const FIXTURES = join(__dirname, '..', 'fixtures');
const hl7Seeds = readdirSync(join(FIXTURES, 'hl7'))
  .filter((f) => f.endsWith('.hl7'))
  .map((f) => readFileSync(join(FIXTURES, 'hl7', f)));
const fhirSeeds = [
  'r4-servicerequest-example-di.json',
  'imaging-ig-servicerequest-example.json',
  'us-core-chest-ct-transaction.json',
].map((f) => readFileSync(join(FIXTURES, 'fhir', f), 'utf8'));

const DELIMS = ['|', '^', '~', '\\', '&', '\r', '\n', '\x0b', '\x1c', '"'];

/** One mutation of a message: byte flips, cuts, duplicated or dropped segments, stray delimiters, charset games. */
function mutateHl7(seed: Buffer, rnd: () => number, i: number): Buffer {
  let text = seed
    .toString('latin1')
    .replace(
      /(MSH\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|[^|]*\|)([^|]*)/,
      `$1FUZZ-${i}`,
    );
  const ops = 1 + Math.floor(rnd() * 3);
  for (let k = 0; k < ops; k++) {
    const at = Math.floor(rnd() * text.length);
    switch (Math.floor(rnd() * 11)) {
      case 0: // flip a byte
        text =
          text.slice(0, at) + String.fromCharCode(Math.floor(rnd() * 256)) + text.slice(at + 1);
        break;
      case 1: // cut the tail
        text = text.slice(0, Math.max(3, at));
        break;
      case 2: // stray delimiter
        text = text.slice(0, at) + DELIMS[Math.floor(rnd() * DELIMS.length)] + text.slice(at);
        break;
      case 3: {
        // duplicate a segment
        const segs = text.split(/\r\n|\r|\n/);
        const s = Math.floor(rnd() * segs.length);
        segs.splice(s, 0, segs[s] ?? '');
        text = segs.join('\r');
        break;
      }
      case 4: {
        // drop a segment (sometimes MSH)
        const segs = text.split(/\r\n|\r|\n/);
        segs.splice(Math.floor(rnd() * segs.length), 1);
        text = segs.join('\r');
        break;
      }
      case 5: // huge field
        text = text.slice(0, at) + 'X'.repeat(Math.floor(rnd() * 20_000)) + text.slice(at);
        break;
      case 6: // charset games
        text =
          text.replace(/\|2\.[0-9.]+\|/, `|2.5.1|`).replace(/(\|[^|\r]*){0}$/, '') +
          (rnd() < 0.5 ? '\r' : '');
        if (/^MSH/.test(text)) {
          const fields = text.split('\r')[0]!.split('|');
          fields[17] = ['8859/1', 'UNICODE UTF-8', 'ASCII', 'KLINGON', ''][Math.floor(rnd() * 5)]!;
          text = [fields.join('|'), ...text.split('\r').slice(1)].join('\r');
        }
        break;
      case 9: // repetition-heavy: thousands of (often empty) repetitions in one field
        text =
          text.slice(0, at) +
          (rnd() < 0.5 ? '~' : 'X~').repeat(1 + Math.floor(rnd() * 30_000)) +
          text.slice(at);
        break;
      case 10: // delimiter-heavy: runs of every delimiter and escape, as a broken sender writes
        text =
          text.slice(0, at) +
          Array.from(
            { length: 1 + Math.floor(rnd() * 20_000) },
            () => DELIMS[Math.floor(rnd() * DELIMS.length)],
          ).join('') +
          text.slice(at);
        break;
      case 7: // bad escape
        text =
          text.slice(0, at) +
          ['\\X', '\\XZZ\\', '\\', '\\H\\', '\\Z99\\'][Math.floor(rnd() * 5)] +
          text.slice(at);
        break;
      default: // random binary
        text =
          text.slice(0, at) +
          Buffer.from(Array.from({ length: 8 }, () => Math.floor(rnd() * 256))).toString('latin1') +
          text.slice(at);
    }
  }
  return Buffer.from(text, 'latin1');
}

function mutateJson(seed: string, rnd: () => number, i: number): string {
  const r = rnd();
  if (r < 0.15) return seed.slice(0, Math.floor(rnd() * seed.length)); // truncated JSON
  if (r < 0.2)
    return Buffer.from(Array.from({ length: 64 }, () => Math.floor(rnd() * 256))).toString(
      'latin1',
    );
  const doc = JSON.parse(seed) as Record<string, unknown>;
  const walk = (node: unknown, depth: number): unknown => {
    if (Array.isArray(node)) return node.map((n) => walk(n, depth + 1));
    if (node && typeof node === 'object') {
      const out: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(node)) {
        const x = rnd();
        if (x < 0.05) continue; // drop
        if (x < 0.1) out[k] = [null, 42, 'x'.repeat(300), [], {}, true][Math.floor(rnd() * 6)];
        else out[k] = walk(v, depth + 1);
      }
      if (rnd() < 0.05) out[`fuzz${depth}`] = 'unexpected';
      return out;
    }
    if (typeof node === 'string' && rnd() < 0.05) return `${node}\u0000\\"`;
    return node;
  };
  const mutated = walk(doc, 0) as Record<string, unknown>;
  // a fresh identifier so conditional creates do not collapse everything into one
  if (mutated.resourceType === 'ServiceRequest')
    mutated.identifier = [{ system: 'urn:fuzz', value: `F-${i}` }];
  return JSON.stringify(mutated);
}

describe('hostile input fuzzing (seeded, bounded)', () => {
  let adapter: TestAdapter;
  let db: Client;

  beforeAll(async () => {
    adapter = await startTestAdapter({
      JOBS_ENABLED: 'false',
      MLLP_MAX_MESSAGE_BYTES: String(256 * 1024),
    });
    db = new Client({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
  });

  it(`answers ${HL7_COUNT} mutated HL7 messages with an acknowledgment each and keeps every one`, async () => {
    const rnd = seededRandom(SEED);
    const rssBefore = process.memoryUsage().rss;
    const codes: Record<string, number> = {};
    let client = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 10_000,
    });
    // md5 of each input sent (not the bytes: 30,000 inputs would weigh on the measured memory)
    const sent: string[] = [];
    for (let i = 0; i < HL7_COUNT; i++) {
      const message = mutateHl7(hl7Seeds[Math.floor(rnd() * hl7Seeds.length)]!, rnd, i);
      // a payload with a frame byte inside would be split by MLLP framing itself: the frame is the protocol
      if (message.includes(0x1c) || message.includes(0x0b)) continue;
      sent.push(createHash('md5').update(message).digest('hex'));
      let reply: Buffer;
      try {
        reply = await client.send(message);
      } catch (error) {
        throw new Error(`input ${i} got no answer: ${(error as Error).message}`, { cause: error });
      }
      let code: string;
      try {
        code = parseHl7(reply).get('MSA-1') ?? 'none';
      } catch {
        code = 'unparseable';
      }
      codes[code] = (codes[code] ?? 0) + 1;
      if (i % 500 === 499) {
        await client.close();
        client = new MllpClient({
          host: '127.0.0.1',
          port: adapter.mllpPort,
          responseTimeoutMs: 10_000,
        });
      }
    }
    await client.close();
    expect(Object.keys(codes).sort()).toEqual(expect.arrayContaining(['AE', 'AR']));
    for (const code of Object.keys(codes))
      expect(['AA', 'AE', 'AR', 'CA', 'CE', 'CR']).toContain(code);
    // every raw input is kept (accepted, rejected or answered as a duplicate)
    const { rows } = await db.query(
      `SELECT count(*)::int AS n FROM inbound_messages WHERE transport = 'mllp'`,
    );
    if (rows[0].n !== sent.length) {
      const stored = new Set(
        (
          await db.query(`SELECT md5(raw) AS h FROM inbound_messages WHERE transport = 'mllp'`)
        ).rows.map((r) => r.h),
      );
      const missing = sent.filter((h) => !stored.has(h));
      throw new Error(`not kept: ${missing.length} inputs (md5 ${missing.slice(0, 5).join(', ')})`);
    }
    expect(rows[0].n).toBe(sent.length);
    global.gc?.();
    const rssGrowthMb = (process.memoryUsage().rss - rssBefore) / 1024 / 1024;
    expect(rssGrowthMb).toBeLessThan(300);
    // still healthy
    expect((await fetch(`${adapter.httpUrl}/health`)).status).toBe(200);
  }, 600_000);

  it(`answers ${FHIR_COUNT} mutated FHIR bodies with a status below 500 and an OperationOutcome for every refusal`, async () => {
    const rnd = seededRandom(SEED + 1);
    const statuses: Record<string, number> = {};
    for (let i = 0; i < FHIR_COUNT; i++) {
      const seed = fhirSeeds[Math.floor(rnd() * fhirSeeds.length)]!;
      const body = mutateJson(seed, rnd, i);
      const isBundle =
        seed.includes('"resourceType": "Bundle"') || seed.includes('"resourceType":"Bundle"');
      const res = await fetch(`${adapter.httpUrl}/fhir${isBundle ? '' : '/ServiceRequest'}`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TEST_TOKENS.sender}`,
          'content-type': 'application/fhir+json',
        },
        body,
      });
      statuses[res.status] = (statuses[res.status] ?? 0) + 1;
      const text = await res.text();
      expect({ i, status: res.status < 500 ? 'ok' : text.slice(0, 300) }).toEqual({
        i,
        status: 'ok',
      });
      if (res.status >= 400) expect(JSON.parse(text).resourceType).toBe('OperationOutcome');
    }
    expect(Object.keys(statuses).some((s) => s.startsWith('4'))).toBe(true);
    expect((await fetch(`${adapter.httpUrl}/health`)).status).toBe(200);
  }, 600_000);

  it('drops an oversized frame with its connection and keeps serving', async () => {
    const client = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 3_000,
    });
    const huge = Buffer.concat([hl7Seeds[0]!, Buffer.from(`NTE|1||${'A'.repeat(300 * 1024)}\r`)]);
    await expect(client.send(huge)).rejects.toThrow();
    await client.close();
    const ok = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 5_000,
    });
    const reply = await ok.send(mutateHl7(hl7Seeds[0]!, () => 0.99, 999_999));
    expect(parseHl7(reply).get('MSA-1')).toMatch(/^(AA|AE|AR|CA)$/);
    await ok.close();
  });
});
