import { RepositoryBase } from './repository-base';

/** The readiness probe's round trip to PostgreSQL. */
export class DatabaseHealthRepository extends RepositoryBase {
  /** Resolves when the database answers a trivial statement. */
  async ping(): Promise<void> {
    await this.db().query('SELECT 1');
  }
}
