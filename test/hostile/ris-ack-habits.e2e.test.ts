import net, { type AddressInfo } from 'node:net';
import { Client as PgClient } from 'pg';
import { MllpClient } from '../../src/hl7';
import { parseHl7 } from '../../src/hl7/hl7-message';
import { MllpDecoder, encodeMllpFrame } from '../../src/hl7/mllp-framing';
import {
  newOrderSpec,
  ormMessage,
  orderByPlacer,
  SANDBOX_CLIENT,
  waitFor,
} from '../e2e/e2e-support';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter';
import { ackSummary } from '../helpers/hl7-fixtures';
import { risAck } from '../outbound/outbound-peers';

jest.setTimeout(120_000);

/**
 * The running adapter sending its ORUs to a RIS with an interface engine's habits: HL7 v2.5.1
 * 2.9.3 enhanced mode (a commit ACK, then the application ACK of the same message, on a kept
 * connection), or one message per connection (the RIS closes after its ACK). Orders come in over MLLP and are
 * cancelled by the RIS (ORC-1 CA) before any upload: each ends locally and its cancelled ORU
 * goes back to the RIS through the outbox.
 * Before, with the first habit each ORU after the first on a connection took two or three
 * attempts (the application ACK of the one before failed it). The second habit is learnt by
 * the client (test/hl7/mllp-client-peers.test.ts shows the race it closes); here it is
 * checked end to end.
 */
type Habit = 'commit ACK then application ACK' | 'one message per connection';

describe.each<Habit>(['commit ACK then application ACK', 'one message per connection'])(
  'a RIS answering with %s, through the running adapter',
  (habit) => {
    let adapter: TestAdapter;
    let db: PgClient;
    let mllp: MllpClient;
    const received: string[] = [];
    let ris: net.Server;

    beforeAll(async () => {
      ris = net.createServer((socket) => {
        const decoder = new MllpDecoder();
        socket.on('data', (chunk) => {
          for (const m of decoder.push(chunk).messages) {
            const inbound = parseHl7(m);
            received.push(inbound.controlId);
            const ack = (code: string) => encodeMllpFrame(risAck(inbound, code));
            if (habit === 'commit ACK then application ACK') {
              socket.write(ack('CA'));
              socket.write(ack('AA'));
            } else {
              socket.end(ack('AA'));
            }
          }
        });
        socket.on('error', () => undefined);
      });
      await new Promise<void>((r) => ris.listen(0, '127.0.0.1', r));
      adapter = await startTestAdapter({
        // no upstream reachable: nothing is placed before the RIS cancels
        IMAGING_BASE_URL: 'http://127.0.0.1:9/v1',
        ...SANDBOX_CLIENT,
        RIS_MLLP_HOST: '127.0.0.1',
        RIS_MLLP_PORT: String((ris.address() as AddressInfo).port),
        OUTBOUND_POLL_MS: '50',
        // two connections to the RIS for eight ORUs: each connection carries several
        OUTBOUND_CONCURRENCY: '2',
        OUTBOUND_BACKOFF_BASE_MS: '5000',
      });
      mllp = new MllpClient({
        host: '127.0.0.1',
        port: adapter.mllpPort,
        responseTimeoutMs: 10_000,
      });
      db = new PgClient({ connectionString: adapter.db.url });
      await db.connect();
    });

    afterAll(async () => {
      await mllp?.close();
      await db?.end();
      await adapter?.close();
      await new Promise((r) => ris?.close(r));
    });

    it('every ORU delivered at its first attempt and received once', async () => {
      const specs = Array.from({ length: 8 }, () => newOrderSpec());
      for (const spec of specs)
        expect(ackSummary(await mllp.send(ormMessage(spec))).code).toBe('AA');
      const ids: string[] = [];
      for (const spec of specs)
        ids.push(
          (await waitFor('order stored', () => orderByPlacer(db, spec.placer))).id as string,
        );
      // cancelled together: their ORUs leave back to back on one connection
      const cancels = await Promise.all(
        specs.map((spec) =>
          mllp.send(ormMessage({ ...spec, orderControl: 'CA', controlId: `CA-${spec.placer}` })),
        ),
      );
      expect(cancels.map((a) => ackSummary(a).code)).toEqual(specs.map(() => 'AA'));
      const rows = await waitFor('ORUs settled', async () => {
        const { rows } = await db.query(
          `SELECT id::text, status, attempts FROM outbox
          WHERE destination = 'ris-hl7' AND order_id = ANY($1::uuid[]) ORDER BY id`,
          [ids],
        );
        return rows.length === ids.length && rows.every((r) => r.status !== 'pending')
          ? rows
          : undefined;
      });
      // before: the second ACK of each message was read as the next one's answer, or the next
      // message went into the connection the RIS was closing: attempts of 2 and more, resends
      expect(rows.map((r) => [r.status, r.attempts])).toEqual(rows.map(() => ['delivered', 1]));
      expect([...received].sort()).toEqual(rows.map((r) => `IAA${r.id}`).sort());
    });
  },
);
