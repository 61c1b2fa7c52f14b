import { startAdapter, StartupError, type RunningAdapter } from './bootstrap';
import { ConfigError } from './config/app-config';

/** `npm start`: run until SIGINT/SIGTERM, then shut down in order (HTTP, workers, database). */
async function main(): Promise<void> {
  let adapter: RunningAdapter;
  try {
    adapter = await startAdapter();
  } catch (error) {
    if (error instanceof ConfigError || error instanceof StartupError) {
      for (const problem of error.problems)
        process.stderr.write(`imaging-ai-adapter: ${problem}\n`);
      process.exit(2);
    }
    process.stderr.write(`imaging-ai-adapter: failed to start: ${(error as Error).message}\n`);
    process.exit(1);
  }
  let stopping = false;
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    process.stderr.write(`imaging-ai-adapter: ${signal} received, shutting down\n`);
    const force = setTimeout(() => process.exit(1), 20_000);
    force.unref();
    adapter
      .close()
      .then(() => process.exit(0))
      .catch(() => process.exit(1));
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  process.on('SIGHUP', stop);
}

void main();
