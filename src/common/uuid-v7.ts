import { randomBytes } from 'node:crypto';

let lastMs = 0;
let seq = 0;

// Random bytes drawn 4 KiB at a time: one call into the CSPRNG per 256 ids, not one per id.
const POOL_SIZE = 4096;
let pool = Buffer.alloc(0);
let poolOffset = POOL_SIZE;

function random16(): Buffer {
  if (poolOffset + 16 > pool.length) {
    pool = randomBytes(POOL_SIZE);
    poolOffset = 0;
  }
  const out = Buffer.from(pool.subarray(poolOffset, poolOffset + 16));
  poolOffset += 16;
  return out;
}

/**
 * RFC 9562 UUIDv7: 48-bit Unix milliseconds, then random bits (with a 12-bit counter in
 * rand_a keeping ids from one process monotonic within a millisecond). Time-ordered keys
 * insert at the right edge of B-tree indexes instead of on random pages, which keeps the
 * WAL (full-page images) and fsync cost of the ingest transaction low.
 */
export function uuidv7(now: number = Date.now()): string {
  if (now === lastMs) {
    seq = (seq + 1) & 0xfff;
  } else {
    lastMs = now;
    seq = -1; // drawn below from this id's own random bytes
  }
  const bytes = random16();
  if (seq < 0) seq = bytes.readUInt16BE(14) & 0x7ff;
  bytes.writeUIntBE(now, 0, 6);
  bytes[6] = 0x70 | (seq >> 8); // version 7 + rand_a high bits
  bytes[7] = seq & 0xff;
  bytes[8] = 0x80 | (bytes[8]! & 0x3f); // variant 10
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
