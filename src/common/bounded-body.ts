/** An answer larger than the reader allows; the rest was not read (the stream is ended). */
export class BodyTooLargeError extends Error {
  constructor(readonly maxBytes: number) {
    super(`the answer is larger than ${maxBytes} bytes; not read further`);
    this.name = 'BodyTooLargeError';
  }
}

/** A stream's chunk as a Buffer: a Buffer as it is, other bytes as a view (no copy), text as UTF-8. */
export function asBuffer(chunk: Uint8Array | string): Buffer {
  if (typeof chunk === 'string') return Buffer.from(chunk);
  return Buffer.isBuffer(chunk)
    ? chunk
    : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
}

/**
 * A peer's answer body, read up to `maxBytes` (docs/security.md: every buffer we hold is
 * bounded): a Node stream (undici `request`) or a fetch Response's body. Beyond the bound it
 * throws BodyTooLargeError; leaving the loop destroys a Node stream and cancels a fetch body,
 * so an endless or oversized answer costs at most `maxBytes` of memory. Callers turn the error
 * into their own (upstream, EHR, SMART, PACS).
 */
export async function readBounded(
  body: AsyncIterable<Uint8Array | string> | null | undefined,
  maxBytes: number,
): Promise<Buffer> {
  if (!body) return Buffer.alloc(0);
  const chunks: Buffer[] = [];
  let received = 0;
  for await (const chunk of body) {
    const bytes = asBuffer(chunk);
    received += bytes.length;
    if (received > maxBytes) throw new BodyTooLargeError(maxBytes);
    chunks.push(bytes);
  }
  return Buffer.concat(chunks);
}

/** readBounded, as UTF-8 text. */
export async function readBodyText(
  body: AsyncIterable<Uint8Array | string> | null | undefined,
  maxBytes: number,
): Promise<string> {
  return (await readBounded(body, maxBytes)).toString('utf8');
}
