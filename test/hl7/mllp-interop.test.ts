import { readFileSync } from 'node:fs';
import path from 'node:path';

import { Client, InboundResponse, Message } from 'node-hl7-client';

import { MllpServer } from '../../src/hl7/mllp-server';
import { evaluateInboundHl7 } from '../../src/mappings/hl7-inbound.evaluator';

/**
 * Interoperability with an independent MLLP implementation: node-hl7-client (the sender a
 * product owner may plug in) talks to our MllpServer over loopback and gets our ACKs.
 */
describe('MllpServer with node-hl7-client as the sender', () => {
  let server: MllpServer;
  let port: number;

  beforeAll(async () => {
    let n = 0;
    server = new MllpServer({
      port: 0,
      handler: async (message) => {
        const result = evaluateInboundHl7({
          bytes: message,
          ackControlId: `ACK-${(n += 1)}`,
          now: new Date('2026-01-01T00:00:00Z'),
        });
        if (result.kind !== 'evaluated') throw result.error;
        return result.ack.bytes;
      },
    });
    ({ port } = await server.listen());
  });

  afterAll(async () => {
    await server.close(2000);
  });

  it('receives an AA for each order, matched by MSA-2', async () => {
    const raw = readFileSync(
      path.join(__dirname, '../fixtures/hl7/orm-o01-v231-ihe-swf-zds.hl7'),
      'latin1',
    ).replace(/\r$/, '');
    const acks: { code: string; controlId: string }[] = [];
    let notify: () => void = () => undefined;
    const client = new Client({ host: '127.0.0.1', version: '2.3.1' });
    const connection = client.createConnection(
      { port, version: '2.3.1' },
      async (res: InboundResponse) => {
        const ack = res.getMessage();
        acks.push({ code: ack.get('MSA.1').toString(), controlId: ack.get('MSA.2').toString() });
        notify();
      },
    );
    try {
      for (const id of ['INTEROP-1', 'INTEROP-2']) {
        const arrived = new Promise<void>((resolve) => (notify = resolve));
        await connection.sendMessage(new Message({ text: raw.replace('MSGID20240318144217', id) }));
        await arrived;
      }
      expect(acks).toEqual([
        { code: 'AA', controlId: 'INTEROP-1' },
        { code: 'AA', controlId: 'INTEROP-2' },
      ]);
    } finally {
      await connection.close();
    }
  });
});
