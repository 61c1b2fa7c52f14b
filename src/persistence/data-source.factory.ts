import { DataSource } from 'typeorm';
import { MIGRATIONS } from '../../migrations';

export interface DataSourceOptions {
  url: string;
  poolSize?: number;
  applicationName?: string;
}

/**
 * The one TypeORM DataSource: migrations, never `synchronize`. No entities: every statement
 * is raw SQL in a repository (persistence/*.repository.ts).
 */
export function createDataSource(options: DataSourceOptions): DataSource {
  return new DataSource({
    type: 'postgres',
    url: options.url,
    entities: [],
    migrations: MIGRATIONS,
    migrationsTableName: 'schema_migrations',
    synchronize: false,
    migrationsRun: false,
    logging: false,
    poolSize: options.poolSize ?? 10,
    applicationName: options.applicationName ?? 'imaging-ai-adapter',
    extra: { connectionTimeoutMillis: 5000 },
  });
}
