/**
 * The time our decisions are made at (study deadlines, retry and hold times, deferrals,
 * recorded decisions): a port, so a test or the sandbox can plug in its own clock. Database
 * times (`now()` in SQL: leases, due times) stay on the database's clock on purpose: every
 * replica then agrees on them.
 */
export interface Clock {
  /** Milliseconds since the epoch, as `Date.now()`. */
  now(): number;
}

/** The machine's clock. */
export const systemClock: Clock = { now: () => Date.now() };
