import type { Readable } from 'node:stream';

/** An answer larger than the reader allows; the rest was not read (the stream is destroyed). */
export class BodyTooLargeError extends Error {
  constructor(readonly maxBytes: number) {
    super(`the answer is larger than ${maxBytes} bytes; not read further`);
    this.name = 'BodyTooLargeError';
  }
}

/**
 * A peer's answer body as text, read up to `maxBytes` (docs/security.md: every buffer we hold
 * is bounded). Beyond it the stream is destroyed and BodyTooLargeError thrown, so an endless
 * or oversized answer costs at most `maxBytes` of memory.
 */
export async function readBodyText(body: Readable, maxBytes: number): Promise<string> {
  const chunks: Buffer[] = [];
  let received = 0;
  for await (const chunk of body) {
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer);
    received += bytes.length;
    if (received > maxBytes) {
      body.destroy();
      throw new BodyTooLargeError(maxBytes);
    }
    chunks.push(bytes);
  }
  return Buffer.concat(chunks).toString('utf8');
}
