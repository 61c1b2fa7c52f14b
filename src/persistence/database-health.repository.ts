import type { Queryable } from './queryable';

/** The readiness probe's round trip to PostgreSQL. */
export class DatabaseHealthRepository {
  constructor(private readonly db: Queryable) {}

  /** Resolves when the database answers a trivial statement. */
  async ping(): Promise<void> {
    await this.db.query('SELECT 1');
  }
}
