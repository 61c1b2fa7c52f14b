import { probeDataDir } from './common/data-dir-probe';
import { probeListenPorts } from './common/port-probe';
import { ConfigError, loadConfig } from './config/app-config';
import { listenPorts } from './config/listen-ports';
import { routeConsoleToLogger } from './observability/logger';
import type { RunningAdapter } from './bootstrap';
import type { Logger } from 'pino';

function fail(problems: string[], code: number): never {
  for (const problem of problems) process.stderr.write(`imaging-ai-adapter: ${problem}\n`);
  process.exit(code);
}

/**
 * Exits once the log lines written so far are out (the logger writes synchronously, so this
 * is at once for the JSON lines; the pretty stream may still hold some). Bounded: a stuck
 * stdout cannot hold the exit.
 */
function exitAfterLogs(logger: Logger, code: number): void {
  const bound = setTimeout(() => process.exit(code), 2_000);
  bound.unref();
  logger.flush(() => process.exit(code));
}

/** `npm start`: run until SIGINT/SIGTERM, then shut down in order (job workers, HTTP and clients, database). */
async function main(): Promise<void> {
  // Configuration and ports first, before the application's modules are loaded (seconds on a
  // busy machine): a bad variable or a port in use fails the start within a second.
  try {
    const config = loadConfig();
    const problems = [
      ...(await probeListenPorts(listenPorts(config))),
      ...(await probeDataDir(config.DATA_DIR)),
    ];
    if (problems.length > 0) fail(problems, 2);
  } catch (error) {
    if (error instanceof ConfigError) fail(error.problems, 2);
    throw error;
  }
  const { startAdapter, StartupError } = await import('./bootstrap');
  let adapter: RunningAdapter;
  try {
    adapter = await startAdapter();
  } catch (error) {
    if (error instanceof ConfigError || error instanceof StartupError) fail(error.problems, 2);
    process.stderr.write(`imaging-ai-adapter: failed to start: ${(error as Error).message}\n`);
    process.exit(1);
  }
  const { logger } = adapter;
  // Every line JSON (or pretty): what libraries print with console.* goes through the logger.
  routeConsoleToLogger(logger);
  // A rejection nobody awaited (seen in a library when the database restarts under it) is
  // logged, not allowed to take every connection and in-flight message down with it: the
  // database pool reconnects and the job queue retries.
  process.on('unhandledRejection', (reason) => {
    logger.error({ err: reason instanceof Error ? reason : String(reason) }, 'unhandled rejection');
  });
  let stopping = false;
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    const started = Date.now();
    logger.info({ signal }, 'shutting down');
    const force = setTimeout(() => {
      logger.error({ signal, ms: Date.now() - started }, 'imaging-ai-adapter stopped (forced)');
      exitAfterLogs(logger, 1);
    }, 20_000);
    force.unref();
    adapter
      .close()
      .then(() => {
        logger.info({ signal, ms: Date.now() - started }, 'imaging-ai-adapter stopped');
        exitAfterLogs(logger, 0);
      })
      .catch((error: unknown) => {
        logger.error(
          { signal, err: error as Error, ms: Date.now() - started },
          'imaging-ai-adapter stopped (a shutdown step failed)',
        );
        exitAfterLogs(logger, 1);
      });
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  process.on('SIGHUP', stop);
}

void main();
