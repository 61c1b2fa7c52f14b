/**
 * The time our decisions are made at (study deadlines, retry and hold times, deferrals,
 * recorded decisions): a port, so a test or the sandbox can plug in its own clock. Database
 * times (`now()` in SQL: leases, due times) stay on the database's clock on purpose: every
 * replica then agrees on them. The upstream client's Clock (imaging-client/ports.ts) is this
 * plus `sleep`, so one implementation can serve both.
 */
export interface Clock {
  /** Milliseconds since the epoch, as `Date.now()`. */
  now(): number;
}

/** The machine's clock. */
export const systemClock: Clock = { now: () => Date.now() };
