import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { guardPduLength } from './dimse-pdu-guard';

function fakeSocket() {
  const s = new EventEmitter() as EventEmitter & { written: Buffer[]; paused: boolean };
  s.written = [];
  s.paused = false;
  Object.assign(s, {
    pause: () => (s.paused = true),
    end: (b: Buffer) => s.written.push(b),
    destroy: () => undefined,
  });
  return s;
}

const pdu = (type: number, length: number, body = Buffer.alloc(0)) => {
  const h = Buffer.alloc(6);
  h.writeUInt8(type, 0);
  h.writeUInt32BE(length, 2);
  return Buffer.concat([h, body]);
};

describe('guardPduLength: a PDU longer than the limit ends the connection', () => {
  it('reads headers split across chunks and skips bodies of allowed PDUs', () => {
    const socket = fakeSocket();
    const claims: number[] = [];
    guardPduLength(socket as unknown as Socket, 100, (n) => claims.push(n));
    const stream = Buffer.concat([
      pdu(1, 50, Buffer.alloc(50)),
      pdu(4, 100, Buffer.alloc(100)),
      pdu(4, 101),
    ]);
    // One byte at a time: every header straddles chunk boundaries.
    for (const byte of stream) socket.emit('data', Buffer.from([byte]));
    expect(claims).toEqual([101]);
    expect(socket.paused).toBe(true);
    expect(socket.written[0]![0]).toBe(0x07);
  });

  it('several PDUs in one chunk: allowed ones pass', () => {
    const socket = fakeSocket();
    const claims: number[] = [];
    guardPduLength(socket as unknown as Socket, 100, (n) => claims.push(n));
    socket.emit('data', Buffer.concat([pdu(4, 10, Buffer.alloc(10)), pdu(5, 4, Buffer.alloc(4))]));
    expect(claims).toEqual([]);
    expect(socket.paused).toBe(false);
  });
});
