import { DataSource } from 'typeorm';
import { MIGRATIONS } from '../../migrations';
import { ENTITIES } from './entities';

export interface DataSourceOptions {
  url: string;
  poolSize?: number;
  applicationName?: string;
}

/** The one TypeORM DataSource: explicit entities and migrations, never `synchronize`. */
export function createDataSource(options: DataSourceOptions): DataSource {
  return new DataSource({
    type: 'postgres',
    url: options.url,
    entities: ENTITIES,
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
