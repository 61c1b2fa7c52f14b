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

/** How long a peer may take (DICOM_SCP_TIMEOUT_SECONDS), and what to say when it is over. */
export interface PduPace {
  timeoutMs: number;
  onTimeout: (reason: string) => void;
}

/**
 * Watches the PDU headers (type, reserved, 32-bit big-endian length; PS3.8 §9.3) of a
 * connection before the library reads them; when one claims more than `limit` bytes it sends
 * an A-ABORT, destroys the socket and calls `onViolation` once. Only the headers are read:
 * the bodies are counted, not kept.
 *
 * With `pace`, a connection is also aborted when it is silent for `timeoutMs` (no byte either
 * way) or when a PDU it began is not complete within `timeoutMs` (a peer dripping a byte at a
 * time is never silent). dcmjs-dimse's own timeouts never end a connection it accepted: its
 * association timeout counts from a connect time only a client socket gets, and on its PDU
 * and socket timeouts the server only half-closes the socket, which stays open for as long
 * as the peer likes. Idle peers held the DICOM_SCP_MAX_ASSOCIATIONS slots for good.
 */
export function guardPduLength(
  socket: Socket,
  limit: number,
  onViolation: (claimed: number) => void,
  pace?: PduPace,
): void {
  let header = Buffer.alloc(0);
  let skip = 0;
  let tripped = false;
  let pduDeadline: NodeJS.Timeout | undefined;
  const abort = () => {
    tripped = true;
    clearTimeout(pduDeadline);
    socket.removeListener('data', watch);
    // Nothing more is read (the library would keep collecting the PDU): the abort goes
    // out, and the connection is gone a moment later whatever the peer does.
    socket.pause();
    socket.end(A_ABORT, () => socket.destroy());
    setTimeout(() => socket.destroy(), 1000).unref();
  };
  const late = (reason: string) => {
    if (tripped) return;
    abort();
    pace?.onTimeout(reason);
  };
  const seconds = pace ? `${pace.timeoutMs / 1000} s (DICOM_SCP_TIMEOUT_SECONDS)` : '';
  const pduBegun = () => {
    if (pace && pduDeadline === undefined)
      pduDeadline = setTimeout(
        () => late(`a PDU not complete within ${seconds}: aborted`),
        pace.timeoutMs,
      );
  };
  const pduComplete = () => {
    clearTimeout(pduDeadline);
    pduDeadline = undefined;
  };
  const watch = (chunk: Buffer) => {
    let offset = 0;
    while (!tripped && offset < chunk.length) {
      if (skip > 0) {
        const n = Math.min(skip, chunk.length - offset);
        skip -= n;
        offset += n;
        if (skip === 0) pduComplete();
        continue;
      }
      pduBegun();
      const need = 6 - header.length;
      header = Buffer.concat([header, chunk.subarray(offset, offset + need)]);
      offset += Math.min(need, chunk.length - offset);
      if (header.length < 6) return;
      const claimed = header.readUInt32BE(2);
      header = Buffer.alloc(0);
      if (claimed > limit) {
        abort();
        onViolation(claimed);
        return;
      }
      skip = claimed;
      if (skip === 0) pduComplete();
    }
  };
  socket.prependListener('data', watch);
  if (pace) {
    // Inactivity in either direction (Node resets it on every read and write); ours runs
    // before the library's listener, which would only half-close the socket.
    socket.setTimeout(pace.timeoutMs);
    socket.prependListener('timeout', () => late(`silent for ${seconds}: aborted`));
    socket.once('close', () => clearTimeout(pduDeadline));
  }
}
