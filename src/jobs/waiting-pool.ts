import { Pool, type PoolClient, type PoolConfig } from 'pg';
import { isDatabaseUnavailable } from '../common/database-unavailable';

type ConnectCallback = (
  err: Error | undefined,
  client: PoolClient | undefined,
  done: (release?: unknown) => void,
) => void;

/**
 * A pg pool whose `connect()` (and so `query()`) waits while the database cannot be reached
 * — refused, restarting, in recovery — instead of failing at once: retried with back-off
 * (100 ms doubling to 2 s) for up to `maxWaitMs`, and not once `shouldWait()` says no (we
 * are stopping) or the pool is ending. Any other error fails as usual.
 *
 * For graphile-worker: it writes "job done" and "job failed" without awaiting them and
 * without retrying a refused connection, so a run that ends during a database restart
 * would leave its job locked by a live worker pool (and an unhandled rejection). Waiting
 * for the database lets the write go through once it is back.
 */
export class WaitingPool extends Pool {
  constructor(
    config: PoolConfig,
    private readonly shouldWait: () => boolean,
    private readonly maxWaitMs: number,
  ) {
    super(config);
  }

  override connect(): Promise<PoolClient>;
  override connect(callback: ConnectCallback): void;
  override connect(callback?: ConnectCallback): Promise<PoolClient> | void {
    const connecting = this.connectWaiting();
    if (!callback) return connecting;
    connecting.then(
      (client) =>
        callback(undefined, client, (release?: unknown) => client.release(release as Error)),
      (err: Error) => callback(err, undefined, () => undefined),
    );
  }

  private async connectWaiting(): Promise<PoolClient> {
    const started = performance.now();
    for (let delay = 100; ; delay = Math.min(delay * 2, 2_000)) {
      try {
        return await super.connect();
      } catch (err) {
        if (
          this.ending ||
          !this.shouldWait() ||
          !isDatabaseUnavailable(err) ||
          performance.now() - started + delay > this.maxWaitMs
        )
          throw err;
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }
}
