import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import net, { type AddressInfo } from 'node:net';
import pino from 'pino';
import { parseHl7 } from '../../src/hl7/hl7-message';
import { MllpDecoder, encodeMllpFrame } from '../../src/hl7/mllp-framing';
import { DicomWebResultPublisher } from '../../src/outbound/dicomweb-result.publisher';
import { FhirResultPublisher } from '../../src/outbound/fhir-result.publisher';
import { Hl7ResultPublisher } from '../../src/outbound/hl7-result.publisher';
import {
  DESTINATIONS,
  type Destination,
  type OutboundSettings,
} from '../../src/outbound/outbound.settings';
import { OutboxOrderEvents } from '../../src/outbound/outbox-order-events';
import { OutboxWorker } from '../../src/outbound/outbox.worker';
import type { Publisher } from '../../src/outbound/publisher';
import type { UpstreamStatus } from '../../src/imaging-spec/imaging-spec';
import { createTestDatabase, type TestDatabase } from '../helpers/database';
import {
  playStatus,
  RESULT_DOCS,
  seedOrder,
  testOutboundSettings,
} from '../outbound/outbound-seed';
import { risAck } from '../outbound/outbound-peers';
import { REPORT_PDF, sourceStudy } from '../outbound/publication-fixtures';

jest.setTimeout(60_000);

/**
 * Results going out to receivers that answer badly: a raw TCP RIS whose ACK bytes a script
 * writes, and an HTTP peer standing in for the EHR and the PACS whose answers a script writes.
 * Each delivery runs through the real outbox worker, so the row's status, attempts and audit
 * entries are what an analyst would see.
 */
const logger = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });

interface RawRis {
  port: number;
  received: string[];
  close(): Promise<void>;
}

/** An ACK as a RIS writes it (MSA-2 = the message's MSH-10), unframed. */
function ackFor(message: string, code = 'AA'): Buffer {
  return risAck(parseHl7(Buffer.from(message, 'latin1')), code);
}

/** A RIS on a raw socket: each framed message is passed to `answer`, which writes what it likes. */
async function startRawRis(answer: (message: string, socket: net.Socket) => void): Promise<RawRis> {
  const received: string[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    const decoder = new MllpDecoder();
    socket.on('data', (chunk) => {
      for (const m of decoder.push(chunk).messages) {
        const text = m.toString('latin1');
        received.push(text);
        answer(text, socket);
      }
    });
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    received,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

type Answer = (req: IncomingMessage, body: Buffer, res: ServerResponse) => void;

/** The EHR (under /fhir) and the PACS (under /dicom-web) on one loopback HTTP server. */
async function startHttpPeer(): Promise<{
  base: string;
  answer: Answer;
  setAnswer(a: Answer): void;
  requests: string[];
  close(): Promise<void>;
}> {
  const requests: string[] = [];
  let answer: Answer = (_req, _body, res) => {
    res.writeHead(500);
    res.end();
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      requests.push(`${req.method} ${req.url}`);
      answer(req, Buffer.concat(chunks), res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get answer() {
      return answer;
    },
    setAnswer(a) {
      answer = a;
    },
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

interface OutboxRow {
  kind: string;
  status: string;
  attempts: number;
  last_error: string | null;
}

describe('hostile: results to receivers that answer badly', () => {
  let db: TestDatabase;
  let http: Awaited<ReturnType<typeof startHttpPeer>>;

  beforeAll(async () => {
    db = await createTestDatabase();
    http = await startHttpPeer();
  });

  afterAll(async () => {
    await http?.close();
    await db?.drop();
  });

  /** A DELIVERED order with its results, published to `destination` by a worker of `publisher`. */
  async function publish(
    destination: Destination,
    publisher: Publisher,
    options: {
      documents?: typeof RESULT_DOCS;
      settings?: Partial<OutboundSettings>;
      /** Intermediate statuses played before DELIVERED (each an ORM status with ormStatusMessages). */
      before?: UpstreamStatus[];
    } = {},
  ): Promise<OutboxRow[]> {
    const settings = testOutboundSettings({ destinations: [destination], ...options.settings });
    const order = await seedOrder(db.dataSource, { source: sourceStudy() });
    for (const status of options.before ?? []) {
      await playStatus(db.dataSource, new OutboxOrderEvents(settings), order, status);
    }
    await playStatus(db.dataSource, new OutboxOrderEvents(settings), order, 'DELIVERED', {
      documents: options.documents ?? RESULT_DOCS,
    });
    const worker = new OutboxWorker({
      dataSource: db.dataSource,
      settings,
      logger,
      pollMs: 20,
      concurrency: 2,
      publishers: [publisher],
    });
    worker.start();
    try {
      const end = Date.now() + 30_000;
      for (;;) {
        const rows: OutboxRow[] = await db.dataSource.query(
          `SELECT kind, status, attempts, last_error FROM outbox
            WHERE order_id = $1 AND destination = $2 ORDER BY id`,
          [order.id, destination],
        );
        if (rows.every((r) => r.status !== 'pending')) return rows;
        if (Date.now() > end) throw new Error(`outbox not drained: ${JSON.stringify(rows)}`);
        await new Promise((r) => setTimeout(r, 30));
      }
    } finally {
      await worker.stop();
    }
  }

  describe('RIS (ORU^R01 over MLLP)', () => {
    let ris: RawRis | undefined;
    afterEach(async () => {
      await ris?.close();
      ris = undefined;
    });

    const hl7Publisher = (port: number) =>
      new Hl7ResultPublisher({
        host: '127.0.0.1',
        port,
        responseTimeoutMs: 1_000,
        settings: testOutboundSettings().hl7,
        connections: 1,
      });

    it('an ACK framed with FS and no CR is read: the ORU is delivered once, not resent until it dies', async () => {
      // Some interface engines end their frames with FS alone; our listener takes such a frame
      // after a moment, and so must our client, or an accepted ORU looks unanswered.
      ris = await startRawRis((message, socket) => {
        socket.write(Buffer.concat([Buffer.from([0x0b]), ackFor(message), Buffer.from([0x1c])]));
      });
      const rows = await publish(DESTINATIONS.hl7, hl7Publisher(ris.port));
      expect(rows).toEqual([
        { kind: 'hl7-oru', status: 'delivered', attempts: 1, last_error: null },
      ]);
      expect(ris.received).toHaveLength(1);
    });

    // HL7 v2.5.1 2.9.3 (enhanced mode): a receiver may send the commit ACK (CA) and then the
    // application ACK (AA) of the same message, whatever MSH-16 asked; some interface engines
    // also repeat an ACK (one from the engine, one from the RIS behind it). The second one is
    // about a message already answered: it is not the answer to the next message.
    it.each([
      ['a commit ACK then an application ACK', ['CA', 'AA']],
      ['the same ACK twice', ['AA', 'AA']],
    ])(
      'a RIS sending %s per message: each message delivered at its first attempt, none sent twice',
      async (_what, codes) => {
        ris = await startRawRis((message, socket) => {
          for (const code of codes) {
            socket.write(encodeMllpFrame(ackFor(message, code)));
          }
        });
        const rows = await publish(DESTINATIONS.hl7, hl7Publisher(ris.port), {
          settings: { ormStatusMessages: true },
          before: ['PREPROCESSING', 'ANALYSIS_RUNNING'],
        });
        expect(rows.map((r) => r.kind)).toEqual(['hl7-orm-status', 'hl7-orm-status', 'hl7-oru']);
        expect(rows.map((r) => [r.status, r.attempts])).toEqual(rows.map(() => ['delivered', 1]));
        expect(ris.received).toHaveLength(rows.length);
      },
    );

    it('a stale ACK naming another message before the right one: the right one is taken', async () => {
      ris = await startRawRis((message, socket) => {
        const stale = ackFor(message)
          .toString('latin1')
          .replace(/MSA\|AA\|[^\r]*/, 'MSA|AA|IAA0');
        socket.write(encodeMllpFrame(Buffer.from(stale, 'latin1')));
        setTimeout(() => {
          socket.write(encodeMllpFrame(ackFor(message)));
        }, 50);
      });
      const rows = await publish(DESTINATIONS.hl7, hl7Publisher(ris.port));
      expect(rows).toEqual([
        { kind: 'hl7-oru', status: 'delivered', attempts: 1, last_error: null },
      ]);
      expect(ris.received).toHaveLength(1);
    });

    // HL7 table 0008: AR is a refusal "for a reason unrelated to content or format" (a RIS
    // down, its database locked), the sender deciding whether to resend; table 0357 names
    // those in ERR (206 record locked, 207 internal error). Modelled on a RIS's ACK with
    // ERR-3 (v2.5+) and with the v2.3.1 ELD in ERR-1 (code in its fourth component).
    it.each([
      ['ERR-3 (v2.5.1)', 'ERR||OBR^1|207^Application internal error^HL70357|E'],
      ['ERR-1.4 (v2.3.1)', 'ERR|OBR^1^^206&Application record locked&HL70357'],
    ])(
      'an AR naming a passing condition in %s is retried, and delivered when the RIS is back',
      async (_where, errSegment) => {
        let n = 0;
        ris = await startRawRis((message, socket) => {
          n += 1;
          const ack =
            n === 1
              ? `${ackFor(message, 'AR').toString('latin1').replace(/\r$/, '')}\r${errSegment}\r`
              : ackFor(message).toString('latin1');
          socket.write(encodeMllpFrame(Buffer.from(ack, 'latin1')));
        });
        const rows = await publish(DESTINATIONS.hl7, hl7Publisher(ris.port));
        // before: a dead letter at once, the result never sent again
        expect(rows).toEqual([
          { kind: 'hl7-oru', status: 'delivered', attempts: 2, last_error: null },
        ]);
        expect((await attemptSummaries('hl7-oru'))[0]).toMatch(
          /ORU\^R01 AR: refused by the RIS for now \(ERR 20[67] Application (internal error|record locked)\)/,
        );
      },
    );

    it('an AR naming an unsupported version (ERR 203) is a dead letter at once', async () => {
      ris = await startRawRis((message, socket) => {
        const ack = `${ackFor(message, 'AR').toString('latin1').replace(/\r$/, '')}\rERR||MSH^1^12|203^Unsupported version id^HL70357|E\r`;
        socket.write(encodeMllpFrame(Buffer.from(ack, 'latin1')));
      });
      const rows = await publish(DESTINATIONS.hl7, hl7Publisher(ris.port));
      expect(rows.map((r) => [r.status, r.attempts, r.last_error])).toEqual([
        ['dead', 1, 'ORU^R01 AR: refused by the RIS'],
      ]);
    });

    // A RIS that validates what it receives answers AE with the field it found wanting (as
    // HAPI-based and Mirth receivers do): ERR-2 the location, ERR-3 table 0357's condition.
    it.each([
      [
        'a required field missing (v2.5.1 ERR-3)',
        'ERR||OBR^1^4|101^Required field missing^HL70357|E',
        '101 Required field missing',
      ],
      [
        'a data type error and a table value (two ERRs)',
        'ERR||OBX^1^14|102^Data type error^HL70357|E\rERR||OBX^1^11|103^Table value not found^HL70357|E',
        '102 Data type error, 103 Table value not found',
      ],
      [
        'an unsupported event (v2.3.1 ELD in ERR-1)',
        'ERR|MSH^1^9^201&Unsupported event code&HL70357',
        '201 Unsupported event code',
      ],
    ])(
      'an AE naming %s is a dead letter at once, saying what the RIS found',
      async (_why, errSegments, said) => {
        let n = 0;
        ris = await startRawRis((message, socket) => {
          n += 1;
          const ack = `${ackFor(message, 'AE').toString('latin1').replace(/\r$/, '')}\r${errSegments}\r`;
          socket.write(encodeMllpFrame(Buffer.from(ack, 'latin1')));
        });
        const rows = await publish(DESTINATIONS.hl7, hl7Publisher(ris.port));
        // before: retried to the last attempt (4 here), the same refusal each time
        expect(rows.map((r) => [r.status, r.attempts, r.last_error])).toEqual([
          ['dead', 1, `ORU^R01 AE: the RIS cannot take this message (ERR ${said})`],
        ]);
        expect(n).toBe(1);
      },
    );

    it('an AE naming a condition that may pass (207) or none at all is retried', async () => {
      let n = 0;
      ris = await startRawRis((message, socket) => {
        n += 1;
        const ae = ackFor(message, 'AE').toString('latin1').replace(/\r$/, '');
        const ack =
          n === 1
            ? `${ae}\rERR||OBR^1|207^Application internal error^HL70357|E\r`
            : n === 2
              ? `${ae}\r`
              : ackFor(message).toString('latin1');
        socket.write(encodeMllpFrame(Buffer.from(ack, 'latin1')));
      });
      const rows = await publish(DESTINATIONS.hl7, hl7Publisher(ris.port));
      expect(rows).toEqual([
        { kind: 'hl7-oru', status: 'delivered', attempts: 3, last_error: null },
      ]);
    });

    /**
     * An AA whose MSA-3 ends in NUL padding (an engine writing a fixed-size C buffer): the answer
     * is kept as text in outbox.last_exchange and the audit, where PostgreSQL takes no NUL.
     * Before, recording the attempt failed, the row was made due again at once and the ORU was
     * sent again, and again: hundreds of copies a second, each taken by the RIS.
     */
    it('an ACK with NUL bytes in MSA-3: delivered once, recorded, never resent in a loop', async () => {
      let n = 0;
      ris = await startRawRis((message, socket) => {
        n += 1;
        const aa = ackFor(message).toString('latin1').replace(/\r$/, '');
        const ack = `${aa.split('\r')[0]}\rMSA|AA|${aa.split('\r')[1]!.split('|')[2]}|OK\u0000\u0000\u0000\r`;
        socket.write(encodeMllpFrame(Buffer.from(ack, 'latin1')));
      });
      const rows = await publish(DESTINATIONS.hl7, hl7Publisher(ris.port));
      expect(rows).toEqual([
        { kind: 'hl7-oru', status: 'delivered', attempts: 1, last_error: null },
      ]);
      expect(n).toBe(1);
    });

    it('a RIS whose every ACK names another control id: a dead letter saying so, not a silent timeout', async () => {
      ris = await startRawRis((message, socket) => {
        const wrong = ackFor(message)
          .toString('latin1')
          .replace(/MSA\|AA\|[^\r]*/, 'MSA|AA|42');
        socket.write(encodeMllpFrame(Buffer.from(wrong, 'latin1')));
      });
      const rows = await publish(DESTINATIONS.hl7, hl7Publisher(ris.port));
      expect(rows.map((r) => [r.status, r.attempts])).toEqual([['dead', 4]]);
      expect(rows[0]!.last_error).toMatch(
        /^gave up after 4 attempts; last answer: ORU\^R01 not acknowledged: MLLP_TIMEOUT; the RIS's 1 replies named other messages in MSA-2, not IAA\d+$/,
      );
    });

    /**
     * What a RIS writes into its ACK is recorded with the attempt: the ACK code, MSA-2, MSA-3's
     * text. An interface engine that puts a Java stack trace into MSA-3 (HAPI- and Mirth-based
     * receivers answer an exception so), or one that answers garbage where MSA-1's code belongs,
     * had every character of it in the attempt's audit detail, and the code in the attempt's
     * summary, the outbox's last_error and the dead letter's reason (also what ALERT_WEBHOOK_URL
     * is told): 100 KB of MSA-1 made each of them 100 KB, at every attempt. Each is now bounded,
     * saying how long it was; the whole ACK stays in the exchange record (bounded there).
     */
    it.each([
      ['an AE whose MSA-3 is a 200 KB Java stack trace', 'AE', 'trace'],
      ['100 KB of garbage where MSA-1’s code belongs', 'Z'.repeat(100_000), 'short'],
    ])('%s: the attempt’s record, summary and reason are bounded', async (_what, code, text) => {
      ris = await startRawRis((message, socket) => {
        const id = message.split('\r')[0]!.split('|')[9]!;
        const trace = Array.from(
          { length: 3_000 },
          (_, i) => `\tat com.vendor.ris.hl7.OruHandler.process(OruHandler.java:${i + 1})`,
        ).join(' ');
        const msa3 =
          text === 'trace' ? `java.lang.NullPointerException: PID-3 ${trace}` : 'not understood';
        const ack = `MSH|^~\\&|RIS|HOSP|IAA|ADAPTER|20261127||ACK^R01^ACK|A${id}|P|2.5.1\rMSA|${code}|${id}|${msa3}\r`;
        socket.write(encodeMllpFrame(Buffer.from(ack, 'latin1')));
      });
      const rows = await publish(DESTINATIONS.hl7, hl7Publisher(ris.port));
      expect(rows.map((r) => [r.status, r.attempts])).toEqual([['dead', 4]]);
      expect(rows[0]!.last_error!.length).toBeLessThan(400);
      const events: Array<{ kind: string; summary: string; detail: unknown }> =
        await db.dataSource.query(
          `SELECT kind, summary, detail FROM audit_events WHERE kind LIKE 'outbound.%'
            AND order_id = (SELECT order_id FROM outbox ORDER BY id DESC LIMIT 1) ORDER BY id`,
        );
      expect(events.map((e) => e.kind)).toEqual([
        ...Array.from({ length: 4 }, () => 'outbound.attempt'),
        'outbound.dead-letter',
      ]);
      for (const e of events) {
        expect(e.summary.length).toBeLessThan(400);
        expect(JSON.stringify(e.detail).length).toBeLessThan(4_000);
      }
      const first = events[0]!.detail as { ackCode: string; text: string };
      if (text === 'trace') {
        expect(first.ackCode).toBe('AE');
        expect(first.text).toMatch(/^java\.lang\.NullPointerException: PID-3 \tat com\.vendor/);
        expect(first.text).toMatch(/… \(\d+ characters\)$/);
      } else {
        expect(first.ackCode).toMatch(/^Z+… \(100000 characters\)$/);
        expect(rows[0]!.last_error).toMatch(/unknown ACK code Z+… \(100000 characters\)$/);
      }
    });
  });

  /** The audit entries of the order's attempts, as the audit page lists them. */
  async function attemptSummaries(kind: string): Promise<string[]> {
    const rows: Array<{ summary: string }> = await db.dataSource.query(
      `SELECT summary FROM audit_events WHERE kind = 'outbound.attempt' AND detail->>'documentKind' = $1
        AND order_id = (SELECT order_id FROM outbox ORDER BY id DESC LIMIT 1) ORDER BY id`,
      [kind],
    );
    return rows.map((r) => r.summary);
  }

  describe('EHR (FHIR conditional update)', () => {
    const fhirPublisher = (timeoutMs = 2_000) =>
      new FhirResultPublisher({ baseUrl: `${http.base}/fhir`, timeoutMs });

    it.each([
      [
        'a gateway JSON that is no resource',
        'application/json',
        '{"status":"error","message":"upstream unavailable"}',
        /is not a FHIR resource; not taken as stored/,
      ],
      [
        'an OperationOutcome with an error',
        'application/fhir+json',
        JSON.stringify({
          resourceType: 'OperationOutcome',
          issue: [{ severity: 'error', code: 'exception', diagnostics: 'database locked' }],
        }),
        /is an OperationOutcome with 1 error\(s\); not taken as stored/,
      ],
      [
        'an HTML login page',
        'text/html',
        '<!DOCTYPE html><html><body><form action="/sso/login">Sign in</form></body></html>',
        /answered 200 to Task with a body that is not FHIR JSON; not taken as stored/,
      ],
    ])(
      'a 200 with %s is not taken as stored: retried, then a dead letter saying why',
      async (_what, contentType, body, reason) => {
        http.setAnswer((_req, _body, res) => {
          res.writeHead(200, { 'content-type': contentType });
          res.end(body);
        });
        const rows = await publish(DESTINATIONS.fhir, fhirPublisher());
        expect(rows.map((r) => [r.kind, r.status, r.attempts])).toEqual([
          ['fhir-task', 'dead', 4],
          ['fhir-diagnostic-report', 'dead', 4],
        ]);
        expect(rows[0]!.last_error).toMatch(/^gave up after 4 attempts; last answer: /);
        expect(rows[0]!.last_error).toMatch(reason);
        expect(await attemptSummaries('fhir-task')).toHaveLength(4);
      },
    );

    it('a 200 whose body trickles for ever: each attempt ends at the deadline, and the dead letter says so', async () => {
      http.setAnswer((_req, _body, res) => {
        res.writeHead(200, { 'content-type': 'application/fhir+json' });
        res.write('{"resourceType":"Task",');
        const timer = setInterval(() => res.write(' '), 100);
        res.on('close', () => clearInterval(timer));
      });
      const rows = await publish(DESTINATIONS.fhir, fhirPublisher(500));
      expect(rows.map((r) => [r.kind, r.status, r.attempts])).toEqual([
        ['fhir-task', 'dead', 4],
        ['fhir-diagnostic-report', 'dead', 4],
      ]);
      expect(rows[0]!.last_error).toBe(
        'gave up after 4 attempts; last answer: no usable answer from the EHR to Task: no complete answer within 500 ms',
      );
    });

    /**
     * An EHR moved behind a new address, or a gateway sending what it does not know to a login
     * page, answers our conditional update with a redirect to another host. It is not followed
     * (our token goes to FHIR_SERVER_URL only) and no retry reaches another host; the dead
     * letter names it as a redirect and where it pointed (the origin only). Before, it read
     * "the EHR answered 307 to Task", leaving the analyst to guess why nothing was stored.
     */
    it.each([307, 308])(
      'a %s to another host: not followed, no credential there, a dead letter naming the redirect and its origin',
      async (code) => {
        const other = await startHttpPeer();
        other.setAnswer((_req, _b, res) => {
          res.writeHead(200, { 'content-type': 'application/fhir+json' });
          res.end('{"resourceType":"Task","id":"elsewhere"}');
        });
        const tokens: Array<string | undefined> = [];
        http.setAnswer((req, _body, res) => {
          tokens.push(req.headers.authorization);
          res.writeHead(code, {
            location: `${other.base}/r4/Task?identifier=urn%3Aimaging-ai-adapter%3Aorder%7Cx&_sso=abc`,
            'content-type': 'text/html',
          });
          res.end('<html><body>Moved</body></html>');
        });
        try {
          const rows = await publish(
            DESTINATIONS.fhir,
            new FhirResultPublisher({
              baseUrl: `${http.base}/fhir`,
              timeoutMs: 2_000,
              bearerToken: 'ehr-token-0123456789',
            }),
          );
          expect(other.requests).toEqual([]);
          expect(tokens).toEqual(['Bearer ehr-token-0123456789', 'Bearer ehr-token-0123456789']);
          const why = (type: string) =>
            `the EHR answered ${code} to ${type}: a redirect to ${other.base}, not followed (our credentials go to FHIR_SERVER_URL only); correct FHIR_SERVER_URL, then replay`;
          expect(rows).toEqual([
            { kind: 'fhir-task', status: 'dead', attempts: 1, last_error: why('Task') },
            {
              kind: 'fhir-diagnostic-report',
              status: 'dead',
              attempts: 1,
              last_error: why('DiagnosticReport'),
            },
          ]);
          const events: Array<{ detail: unknown }> = await db.dataSource.query(
            `SELECT detail FROM audit_events WHERE kind LIKE 'outbound.%'
              AND order_id = (SELECT order_id FROM outbox ORDER BY id DESC LIMIT 1)`,
          );
          expect(JSON.stringify(events)).not.toMatch(/ehr-token|_sso|identifier=/);
        } finally {
          await other.close();
        }
      },
    );

    /**
     * A validating EHR (HAPI's RequestValidatingInterceptor) refusing our resource answers an
     * OperationOutcome with one issue per finding, each with its diagnostics and location:
     * thousands for a large DiagnosticReport against a strict profile. Every issue went into
     * the attempt's audit detail (5,000 issues: over 1 MB, at every attempt). Now the first 20
     * are recorded, each within bounds, with the count beside them; the answer names the issue
     * types as before, and the whole answer stays in the exchange record (bounded there).
     */
    it('a 422 with an OperationOutcome of 5,000 issues: the attempt’s record is bounded, the issue types named', async () => {
      http.setAnswer((_req, _body, res) => {
        res.writeHead(422, { 'content-type': 'application/fhir+json' });
        res.end(
          JSON.stringify({
            resourceType: 'OperationOutcome',
            issue: Array.from({ length: 5_000 }, (_, i) => ({
              severity: 'error',
              code: 'processing',
              diagnostics: `Profile http://example.org/fhir/StructureDefinition/strict-dr, Element 'DiagnosticReport.contained[${i}].valueQuantity': minimum required = 1, but only found 0 ${'x'.repeat(400)}`,
              location: [`DiagnosticReport.contained[${i}].valueQuantity`, `Line[1] Col[${i}]`],
              expression: [`DiagnosticReport.contained[${i}].valueQuantity`],
            })),
          }),
        );
      });
      const rows = await publish(DESTINATIONS.fhir, fhirPublisher());
      expect(rows.map((r) => [r.kind, r.status, r.attempts])).toEqual([
        ['fhir-task', 'dead', 1],
        ['fhir-diagnostic-report', 'dead', 1],
      ]);
      expect(rows[0]!.last_error).toBe(
        "the EHR answered 422 to Task: the EHR's rules refused the resource (OperationOutcome processing)",
      );
      const events: Array<{
        detail: {
          operationOutcome: Array<{ diagnostics: string }>;
          operationOutcomeIssues: number;
        };
      }> = await db.dataSource.query(
        `SELECT detail FROM audit_events WHERE kind = 'outbound.attempt'
          AND order_id = (SELECT order_id FROM outbox ORDER BY id DESC LIMIT 1) ORDER BY id`,
      );
      expect(events).toHaveLength(2);
      for (const e of events) {
        expect(e.detail.operationOutcome).toHaveLength(20);
        expect(e.detail.operationOutcomeIssues).toBe(5_000);
        expect(e.detail.operationOutcome[0]!.diagnostics).toMatch(/^Profile http:\/\/example/);
        expect(JSON.stringify(e.detail).length).toBeLessThan(20_000);
      }
    });

    it('a 201 with no body (return=minimal) or the stored resource is delivered', async () => {
      let n = 0;
      http.setAnswer((_req, body, res) => {
        n += 1;
        if (n === 1) {
          res.writeHead(201, { location: `${http.base}/fhir/Task/t1/_history/1` });
          res.end();
          return;
        }
        res.writeHead(200, { 'content-type': 'application/fhir+json' });
        res.end(JSON.stringify({ ...JSON.parse(body.toString()), id: 'r1' }));
      });
      const rows = await publish(DESTINATIONS.fhir, fhirPublisher());
      expect(rows.map((r) => [r.kind, r.status, r.attempts])).toEqual([
        ['fhir-task', 'delivered', 1],
        ['fhir-diagnostic-report', 'delivered', 1],
      ]);
    });

    it('a 401 or 403 (our credentials refused) is retried and says so, and stored once fixed', async () => {
      let n = 0;
      http.setAnswer((_req, body, res) => {
        n += 1;
        if (n <= 2) {
          res.writeHead(n === 1 ? 401 : 403, { 'content-type': 'application/fhir+json' });
          res.end(
            JSON.stringify({
              resourceType: 'OperationOutcome',
              issue: [{ severity: 'error', code: 'security', diagnostics: 'token expired' }],
            }),
          );
          return;
        }
        res.writeHead(200, { 'content-type': 'application/fhir+json' });
        res.end(JSON.stringify({ ...JSON.parse(body.toString()), id: `r${n}` }));
      });
      const rows = await publish(DESTINATIONS.fhir, fhirPublisher());
      // a static token that expired made every result of the outage a dead letter at once
      expect(rows.map((r) => [r.kind, r.status])).toEqual([
        ['fhir-task', 'delivered'],
        ['fhir-diagnostic-report', 'delivered'],
      ]);
      expect((await attemptSummaries('fhir-task'))[0]).toMatch(
        /the EHR answered 401 to Task: our credentials were refused/,
      );
    });
    /** An OperationOutcome as a FHIR server writes one (R4 operationoutcome.html). */
    const outcome = (code: string, diagnostics: string) =>
      JSON.stringify({
        resourceType: 'OperationOutcome',
        issue: [{ severity: 'error', code, diagnostics }],
      });

    // R4 http.html: 409 is a version conflict (HAPI answers it when two writes of one resource
    // meet, "HAPI-0550"), and an issue whose type is `transient` or under it (lock-error,
    // no-store, exception, timeout, incomplete, throttled: R4 valueset-issue-type) says a
    // retry may work; both passed, but were dead letters at once.
    it.each([
      [409, 'conflict', 'Version conflict: the resource was modified concurrently'],
      [400, 'lock-error', 'Could not obtain a lock on the resource'],
      [422, 'exception', 'Database connection lost'],
    ])(
      'a %s with an OperationOutcome %s is retried, and stored when it passes',
      async (status, code, diagnostics) => {
        let n = 0;
        http.setAnswer((_req, body, res) => {
          n += 1;
          if (n === 1) {
            res.writeHead(status, { 'content-type': 'application/fhir+json' });
            res.end(outcome(code, diagnostics));
            return;
          }
          res.writeHead(200, { 'content-type': 'application/fhir+json' });
          res.end(JSON.stringify({ ...JSON.parse(body.toString()), id: `r${n}` }));
        });
        const rows = await publish(DESTINATIONS.fhir, fhirPublisher());
        expect(rows.map((r) => [r.kind, r.status, r.attempts])).toEqual([
          ['fhir-task', 'delivered', 2],
          ['fhir-diagnostic-report', 'delivered', 1],
        ]);
      },
    );

    it.each([
      [
        412,
        'multiple-matches',
        /the EHR answered 412 to Task: more than one Task matches our identifier \(R4 conditional update\); the EHR's copies are to be merged before a replay \(OperationOutcome multiple-matches\)$/,
      ],
      [
        422,
        'business-rule',
        /the EHR answered 422 to Task: the EHR's rules refused the resource \(OperationOutcome business-rule\)$/,
      ],
    ])(
      'a %s (%s) is a dead letter at once that says what the EHR meant',
      async (status, code, reason) => {
        http.setAnswer((_req, _body, res) => {
          res.writeHead(status, { 'content-type': 'application/fhir+json' });
          res.end(outcome(code, 'refused'));
        });
        const rows = await publish(DESTINATIONS.fhir, fhirPublisher());
        expect(rows.map((r) => [r.kind, r.status, r.attempts])).toEqual([
          ['fhir-task', 'dead', 1],
          ['fhir-diagnostic-report', 'dead', 1],
        ]);
        expect(rows[0]!.last_error).toMatch(reason);
      },
    );
  });

  describe('PACS (STOW-RS)', () => {
    it('a 401 (DICOMWEB_TOKEN expired) is retried, and stored once the operator has fixed it', async () => {
      let n = 0;
      http.setAnswer((_req, _body, res) => {
        n += 1;
        if (n <= 2) {
          res.writeHead(401, { 'www-authenticate': 'Bearer error="invalid_token"' });
          res.end();
          return;
        }
        res.writeHead(200, { 'content-type': 'application/dicom+json' });
        res.end(JSON.stringify({ '00081199': { vr: 'SQ', Value: [{}] } }));
      });
      const rows = await publish(
        DESTINATIONS.dicom,
        new DicomWebResultPublisher({ baseUrl: `${http.base}/dicom-web`, timeoutMs: 2_000 }),
      );
      // the SR met both 401s; it was a dead letter at once, the PDF after it too
      expect(rows.map((r) => [r.kind, r.status])).toEqual([
        ['dicom-sr', 'delivered'],
        ['dicom-pdf', 'delivered'],
      ]);
    });

    it('a 409 whose every failure is A700 (out of resources) is retried, and stored once the PACS has room', async () => {
      let n = 0;
      http.setAnswer((_req, _body, res) => {
        n += 1;
        res.writeHead(n <= 2 ? 409 : 200, { 'content-type': 'application/dicom+json' });
        res.end(
          JSON.stringify(
            n <= 2
              ? {
                  '00081198': {
                    vr: 'SQ',
                    Value: [
                      {
                        '00081150': { vr: 'UI', Value: ['1.2.840.10008.5.1.4.1.1.88.34'] },
                        '00081155': { vr: 'UI', Value: ['2.25.1'] },
                        '00081197': { vr: 'US', Value: [0xa700] },
                      },
                    ],
                  },
                }
              : { '00081199': { vr: 'SQ', Value: [{}] } },
          ),
        );
      });
      const rows = await publish(
        DESTINATIONS.dicom,
        new DicomWebResultPublisher({ baseUrl: `${http.base}/dicom-web`, timeoutMs: 2_000 }),
      );
      expect(rows.map((r) => [r.kind, r.status, r.attempts])).toEqual([
        ['dicom-sr', 'delivered', 3],
        ['dicom-pdf', 'delivered', 1],
      ]);
      expect(await attemptSummaries('dicom-sr')).toEqual([
        expect.stringMatching(
          /attempt 1: the PACS answered 409 to the SR \(1 refused: 0xA7\w\w out of resources\) \(retry in/,
        ),
        expect.stringMatching(
          /attempt 2: the PACS answered 409 to the SR \(1 refused: 0xA7\w\w out of resources\) \(retry in/,
        ),
        expect.stringMatching(/attempt 3: SR stored by the PACS \(200\)$/),
      ]);
    });

    /**
     * A PACS (or a proxy in front of it) answering our one-instance STOW with a Failed SOP
     * Sequence of thousands of items, each with its own Failure Reason. Every item went into
     * the attempt's detail and every distinct reason into its summary, the outbox's last_error
     * and the dead letter's reason: 3,000 reasons made each of them over 100 KB. Now the first
     * few are named and the rest counted.
     */
    it('a 409 naming 3,000 failed SOPs with as many reasons: the attempt’s summary, reason and record are bounded', async () => {
      http.setAnswer((_req, _body, res) => {
        res.writeHead(409, { 'content-type': 'application/dicom+json' });
        res.end(
          JSON.stringify({
            '00081198': {
              vr: 'SQ',
              Value: Array.from({ length: 3_000 }, (_, i) => ({
                '00081150': { vr: 'UI', Value: ['1.2.840.10008.5.1.4.1.1.88.34'] },
                '00081155': { vr: 'UI', Value: [`2.25.${i + 1}`] },
                '00081197': { vr: 'US', Value: [0xc000 + i] },
              })),
            },
          }),
        );
      });
      const rows = await publish(
        DESTINATIONS.dicom,
        new DicomWebResultPublisher({ baseUrl: `${http.base}/dicom-web`, timeoutMs: 2_000 }),
      );
      expect(rows.map((r) => [r.kind, r.status, r.attempts])).toEqual([
        ['dicom-sr', 'dead', 1],
        ['dicom-pdf', 'dead', 1],
      ]);
      expect(rows[0]!.last_error).toMatch(
        /^the PACS answered 409 to the SR \(3000 refused: 0xC000 .*, 0xC001 .*, 0xC002 .* and 2997 more reasons\)$/,
      );
      expect(rows[0]!.last_error!.length).toBeLessThan(400);
      const events: Array<{
        summary: string;
        detail: { failedSops: unknown[]; failedSopCount: number };
      }> = await db.dataSource.query(
        `SELECT summary, detail FROM audit_events WHERE kind = 'outbound.attempt'
            AND order_id = (SELECT order_id FROM outbox ORDER BY id DESC LIMIT 1) ORDER BY id`,
      );
      for (const e of events) {
        expect(e.summary.length).toBeLessThan(400);
        expect(e.detail.failedSops).toHaveLength(20);
        expect(e.detail.failedSopCount).toBe(3_000);
        expect(JSON.stringify(e.detail).length).toBeLessThan(4_000);
      }
    });

    /**
     * A PACS moved behind a new address (or a portal sending us to its login page) answers our
     * STOW-RS with a redirect to another host. It is not followed (DICOMWEB_TOKEN goes to
     * DICOMWEB_URL only); the dead letter names it as a redirect and where it pointed (the
     * origin only), as the EHR's does. Before, it read "the PACS answered 307 to the SR".
     */
    it('a 307 to another host: not followed, no token there, a dead letter naming the redirect and its origin', async () => {
      const other = await startHttpPeer();
      other.setAnswer((_req, _b, res) => {
        res.writeHead(200, { 'content-type': 'application/dicom+json' });
        res.end('{}');
      });
      const tokens: Array<string | undefined> = [];
      http.setAnswer((req, _body, res) => {
        tokens.push(req.headers.authorization);
        res.writeHead(307, { location: `${other.base}/wado/studies/1.2.3?session=abc` });
        res.end();
      });
      try {
        const rows = await publish(
          DESTINATIONS.dicom,
          new DicomWebResultPublisher({
            baseUrl: `${http.base}/dicom-web`,
            timeoutMs: 2_000,
            bearerToken: 'pacs-token-0123456789',
          }),
        );
        expect(other.requests).toEqual([]);
        expect(tokens).toEqual(['Bearer pacs-token-0123456789', 'Bearer pacs-token-0123456789']);
        const why = (label: string) =>
          `the PACS answered 307 to the ${label}: a redirect to ${other.base}, not followed (our credentials go to DICOMWEB_URL only); correct DICOMWEB_URL, then replay`;
        expect(rows.map((r) => [r.kind, r.status, r.attempts, r.last_error])).toEqual([
          ['dicom-sr', 'dead', 1, why('SR')],
          ['dicom-pdf', 'dead', 1, why('encapsulated PDF')],
        ]);
      } finally {
        await other.close();
      }
    });

    it('a 200 with an HTML page is not taken as stored: retried, then a dead letter saying why', async () => {
      http.setAnswer((_req, _body, res) => {
        res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
        res.end('<html><head><title>Session expired</title></head><body>Log in</body></html>');
      });
      const rows = await publish(
        DESTINATIONS.dicom,
        new DicomWebResultPublisher({ baseUrl: `${http.base}/dicom-web`, timeoutMs: 2_000 }),
      );
      expect(rows.map((r) => [r.kind, r.status, r.attempts])).toEqual([
        ['dicom-sr', 'dead', 4],
        ['dicom-pdf', 'dead', 4],
      ]);
      expect(rows[0]!.last_error).toMatch(
        /last answer: the PACS answered 200 to the SR with an HTML page, not a STOW-RS answer/,
      );
    });
  });

  describe('a large results PDF', () => {
    /** The results documents with a PDF of `bytes` (the report, then PDF whitespace). */
    const withPdf = (bytes: number) =>
      RESULT_DOCS.map((d) =>
        d.reportType === 'PDF'
          ? {
              ...d,
              body: Buffer.concat([REPORT_PDF, Buffer.alloc(bytes - REPORT_PDF.length, 0x20)]),
            }
          : d,
      );
    const pacs = 'http://pacs.example.org/dicom-web';
    let bodies: Buffer[] = [];
    const storingEhr = () => {
      bodies = [];
      http.setAnswer((_req, body, res) => {
        bodies.push(body);
        res.writeHead(200, { 'content-type': 'application/fhir+json' });
        res.end(JSON.stringify({ ...JSON.parse(body.toString()), id: `r${bodies.length}` }));
      });
    };
    const reportSent = () =>
      bodies
        .map(
          (b) =>
            JSON.parse(b.toString()) as {
              resourceType: string;
              presentedForm?: Array<Record<string, unknown>>;
            },
        )
        .find((r) => r.resourceType === 'DiagnosticReport')!;

    it('a 2 MB PDF goes inside the DiagnosticReport (our validation refused any over 1 MiB)', async () => {
      storingEhr();
      const rows = await publish(
        DESTINATIONS.fhir,
        new FhirResultPublisher({ baseUrl: `${http.base}/fhir`, timeoutMs: 5_000 }),
        { documents: withPdf(2 * 1024 * 1024) },
      );
      expect(rows.map((r) => [r.kind, r.status])).toEqual([
        ['fhir-task', 'delivered'],
        ['fhir-diagnostic-report', 'delivered'],
      ]);
      const pdf = reportSent().presentedForm!.find((f) => f.contentType === 'application/pdf')!;
      expect(Buffer.from(pdf.data as string, 'base64')).toHaveLength(2 * 1024 * 1024);
    });

    it('a 30 MB PDF: the DiagnosticReport and the ORU carry its reference (the PACS copy), not the bytes', async () => {
      storingEhr();
      const documents = withPdf(30 * 1024 * 1024);
      const settings = {
        pdfEmbedMaxBytes: 5 * 1024 * 1024,
        pacsBaseUrl: pacs,
        destinations: [DESTINATIONS.fhir, DESTINATIONS.dicom],
      };
      // before: our validation refused the report (a dead letter), the result went nowhere
      const rows = await publish(
        DESTINATIONS.fhir,
        new FhirResultPublisher({ baseUrl: `${http.base}/fhir`, timeoutMs: 5_000 }),
        { documents, settings },
      );
      expect(rows.map((r) => r.status)).toEqual(['delivered', 'delivered']);
      const form = reportSent().presentedForm!.find((f) => f.contentType === 'application/pdf')!;
      expect(form.data).toBeUndefined();
      expect(form.url).toMatch(
        new RegExp(`^${pacs}/studies/[0-9.]+/series/[0-9.]+/instances/[0-9.]+$`),
      );
      expect(form.size).toBe(30 * 1024 * 1024);
      expect(form.hash).toMatch(/^[A-Za-z0-9+/]{27}=$/);
      expect(Math.max(...bodies.map((b) => b.length))).toBeLessThan(1024 * 1024);

      // the RIS: an RP pointing at the same copy; the ORU stays small
      const ris = await startRawRis((message, socket) => {
        socket.write(encodeMllpFrame(ackFor(message)));
      });
      try {
        const oru = await publish(
          DESTINATIONS.hl7,
          new Hl7ResultPublisher({
            host: '127.0.0.1',
            port: ris.port,
            responseTimeoutMs: 5_000,
            settings: testOutboundSettings().hl7,
            connections: 1,
          }),
          {
            documents,
            settings: { ...settings, destinations: [DESTINATIONS.hl7, DESTINATIONS.dicom] },
          },
        );
        expect(oru.map((r) => [r.kind, r.status])).toEqual([['hl7-oru', 'delivered']]);
        const message = ris.received[0]!;
        expect(message.length).toBeLessThan(1024 * 1024);
        const rp = message.split('\r').find((seg) => seg.split('|')[2] === 'RP');
        expect(rp?.split('|')[3]).toBe('PDF^Report PDF^99IAA');
        const [pointer, ...rest] = rp!.split('|')[5]!.split('^');
        expect(pointer).toMatch(
          new RegExp(`^${pacs}/studies/[0-9.]+/series/[0-9.]+/instances/[0-9.]+$`),
        );
        expect(rest).toEqual(['PACS', 'Application', 'PDF']);
        expect(message).not.toMatch(/\|ED\|/);
      } finally {
        await ris.close();
      }
    });
  });
});
