import { get } from 'node:http';

/**
 * One `GET /health` on a connection of its own (closed after it). A kept-alive connection can
 * be closed by the server's keep-alive timer in the same turn as the next check is written on
 * it, when the event loop was held past that timeout: the check then fails with ECONNRESET,
 * which says nothing about whether the service answers.
 */
function healthOnce(httpUrl: string): Promise<void> {
  return new Promise((resolve, reject) => {
    get(`${httpUrl}/health`, { agent: false }, (res) => {
      res.on('error', reject);
      res.on('end', resolve);
      res.resume();
    }).on('error', reject);
  });
}

/**
 * Runs `work` while asking `GET /health` every 50 ms, one request at a time: how long the
 * slowest answer took while the work ran is how long the service could not answer (its event
 * loop held by the work). Returns the work's result with the figures.
 */
export async function watchingHealth<T>(
  httpUrl: string,
  work: () => Promise<T>,
): Promise<{ result: T; worstHealthMs: number; healthChecks: number }> {
  let done = false;
  let worstHealthMs = 0;
  let healthChecks = 0;
  const watcher = (async () => {
    while (!done) {
      const started = Date.now();
      await healthOnce(httpUrl);
      worstHealthMs = Math.max(worstHealthMs, Date.now() - started);
      healthChecks += 1;
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  try {
    const result = await work();
    return { result, worstHealthMs, healthChecks };
  } finally {
    done = true;
    await watcher;
  }
}
