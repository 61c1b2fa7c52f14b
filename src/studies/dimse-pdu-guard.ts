import type { Socket } from 'node:net';

/**
 * The largest PDU our SCP reads. We advertise a Maximum Length of 256 KiB (dcmjs-dimse's
 * default, PS3.8 §D.1) for P-DATA-TF, and an A-ASSOCIATE-RQ with every Storage SOP Class in
 * several transfer syntaxes stays well under 1 MiB. dcmjs-dimse collects a whole PDU in memory
 * (growing one Buffer per chunk) before it looks at it, whatever length the header claims:
 * a peer announcing a 2 GiB PDU and sending it would hold 2 GiB of our memory per connection.
 */
export const MAX_PDU_BYTES = 1024 * 1024;

/** A-ABORT, source: service provider (2), reason: invalid PDU parameter value (6) (PS3.8 §9.3.8). */
const A_ABORT = Buffer.from([0x07, 0, 0, 0, 0, 4, 0, 0, 2, 6]);

/**
 * Watches the PDU headers (type, reserved, 32-bit big-endian length; PS3.8 §9.3) of a
 * connection before the library reads them; when one claims more than `limit` bytes it sends
 * an A-ABORT, destroys the socket and calls `onViolation` once. Only the headers are read:
 * the bodies are counted, not kept.
 */
export function guardPduLength(
  socket: Socket,
  limit: number,
  onViolation: (claimed: number) => void,
): void {
  let header = Buffer.alloc(0);
  let skip = 0;
  let tripped = false;
  const watch = (chunk: Buffer) => {
    let offset = 0;
    while (!tripped && offset < chunk.length) {
      if (skip > 0) {
        const n = Math.min(skip, chunk.length - offset);
        skip -= n;
        offset += n;
        continue;
      }
      const need = 6 - header.length;
      header = Buffer.concat([header, chunk.subarray(offset, offset + need)]);
      offset += Math.min(need, chunk.length - offset);
      if (header.length < 6) return;
      const claimed = header.readUInt32BE(2);
      header = Buffer.alloc(0);
      if (claimed > limit) {
        tripped = true;
        socket.removeListener('data', watch);
        // Nothing more is read (the library would keep collecting the PDU): the abort goes
        // out, and the connection is gone a moment later whatever the peer does.
        socket.pause();
        socket.end(A_ABORT, () => socket.destroy());
        setTimeout(() => socket.destroy(), 1000).unref();
        onViolation(claimed);
        return;
      }
      skip = claimed;
    }
  };
  socket.prependListener('data', watch);
}
