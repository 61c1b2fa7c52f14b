import type { Logger } from 'pino';

/** Where refused input is kept (the intake use case's recordRejected). */
export interface RefusalSink<T> {
  recordRejected(input: T): Promise<unknown>;
}

/**
 * Keeps a refused message for the analyst. A failure to store it is logged, never thrown:
 * the sender still gets its refusal. Returns whether the refusal was stored.
 */
export async function recordRefusal<T>(
  sink: RefusalSink<T>,
  input: T,
  logger: Pick<Logger, 'error'>,
  what: string,
): Promise<boolean> {
  try {
    await sink.recordRejected(input);
    return true;
  } catch (error) {
    logger.error({ err: (error as Error).message }, `${what} could not be stored`);
    return false;
  }
}
