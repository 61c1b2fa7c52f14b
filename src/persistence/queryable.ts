import type { EntityManager } from 'typeorm';

/**
 * What a repository runs its SQL on: the DataSource (each statement on a pooled connection)
 * or a transaction's EntityManager (the caller's transaction).
 */
export type Queryable = Pick<EntityManager, 'query'>;
