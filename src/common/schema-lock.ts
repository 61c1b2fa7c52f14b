import { Client } from 'pg';

/** Arbitrary but fixed: every replica takes the same advisory lock before changing the schema. */
const SCHEMA_LOCK_KEY = 7_470_301_121;

/**
 * Serialises schema changes across replicas (our migrations and the job queue's): `work`
 * runs while this session holds a PostgreSQL advisory lock on its own connection to `url`.
 */
export async function withSchemaLock<T>(url: string, work: () => Promise<T>): Promise<T> {
  const client = new Client({
    connectionString: url,
    application_name: 'imaging-ai-adapter-migrate',
  });
  await client.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [SCHEMA_LOCK_KEY]);
    try {
      return await work();
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [SCHEMA_LOCK_KEY]);
    }
  } finally {
    await client.end();
  }
}
