import type { Queryable } from './queryable';

/**
 * What every repository class shares: the connection it was built with (the DataSource, each
 * statement on a pooled connection, or a transaction's EntityManager) and the choice, per
 * call, of the caller's transaction instead. Subclasses hold typed methods and their SQL only.
 */
export abstract class RepositoryBase {
  constructor(private readonly connection: Queryable) {}

  /** Where a statement runs: on `manager` when given (the caller's transaction), else on ours. */
  protected db(manager?: Queryable): Queryable {
    return manager ?? this.connection;
  }
}
