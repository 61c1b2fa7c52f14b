import { once } from 'node:events';
import type { WriteStream } from 'node:fs';

/** Ends a file being written and waits until it is closed (its bytes are on disk). */
export async function closeStream(stream: WriteStream): Promise<void> {
  stream.end();
  await once(stream, 'close');
}

/**
 * Ends a file after a failure: finished, not destroyed (destroying it with writes in flight
 * makes fs report them as failed writes after we have moved on), and without an error of its own.
 */
export async function closeQuietly(stream: WriteStream): Promise<void> {
  if (stream.closed) return;
  stream.on('error', () => undefined);
  const closed = once(stream, 'close').catch(() => undefined);
  stream.end();
  await closed;
}
