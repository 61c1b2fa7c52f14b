import { spawn } from 'node:child_process';
import { Client } from 'pg';
import { createDataSource } from '../../src/persistence/data-source.factory';
import { migrateUnderLock, revertLastMigration } from '../../src/persistence/migrator';
import { MIGRATIONS } from '../../migrations';
import { createEmptyDatabase } from '../helpers/database';

async function tables(url: string): Promise<string[]> {
  const c = new Client({ connectionString: url });
  await c.connect();
  try {
    const { rows } = await c.query<{ tablename: string }>(
      `SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename`,
    );
    return rows.map((r) => r.tablename);
  } finally {
    await c.end();
  }
}

async function functionSettings(url: string): Promise<Record<string, string[]>> {
  const c = new Client({ connectionString: url });
  await c.connect();
  try {
    const { rows } = await c.query<{ proname: string; proconfig: string[] }>(
      `SELECT proname, proconfig FROM pg_proc
        WHERE proname IN ('intake_accept_batch', 'intake_lock_and_find') ORDER BY proname`,
    );
    return Object.fromEntries(rows.map((r) => [r.proname, [...r.proconfig].sort()]));
  } finally {
    await c.end();
  }
}

describe('migrations', () => {
  it('apply up, revert down one by one, and apply again', async () => {
    const db = await createEmptyDatabase();
    const ds = createDataSource({ url: db.url, poolSize: 2 });
    await ds.initialize();
    try {
      const first = await migrateUnderLock(ds, db.url);
      expect(first.applied).toHaveLength(MIGRATIONS.length);
      expect(await tables(db.url)).toEqual(
        expect.arrayContaining([
          'audit_events',
          'inbound_messages',
          'orders',
          'outbox',
          'schema_migrations',
        ]),
      );
      expect((await migrateUnderLock(ds, db.url)).applied).toEqual([]);
      // the per-message intake functions: no sequential scans, never compiled by JIT, planned
      // once per connection
      expect(await functionSettings(db.url)).toEqual({
        intake_accept_batch: [
          'enable_seqscan=off',
          'jit=off',
          'plan_cache_mode=force_generic_plan',
        ],
        intake_lock_and_find: [
          'enable_seqscan=off',
          'jit=off',
          'plan_cache_mode=force_generic_plan',
        ],
      });
      for (let i = 0; i < MIGRATIONS.length; i++) await revertLastMigration(ds, db.url);
      expect(await tables(db.url)).toEqual(['schema_migrations']);
      expect((await migrateUnderLock(ds, db.url)).applied).toHaveLength(MIGRATIONS.length);
    } finally {
      await ds.destroy();
      await db.drop();
    }
  });

  it('two processes migrating one empty database at once: both succeed, schema migrated once', async () => {
    const db = await createEmptyDatabase();
    try {
      const run = () =>
        new Promise<{ code: number | null; out: string }>((resolve) => {
          const child = spawn(
            process.execPath,
            ['-r', '@swc-node/register', 'src/persistence/migrate.cli.ts', 'up'],
            { env: { ...process.env, DATABASE_URL: db.url }, stdio: ['ignore', 'pipe', 'pipe'] },
          );
          let out = '';
          child.stdout.on('data', (c: Buffer) => (out += c.toString()));
          child.stderr.on('data', (c: Buffer) => (out += c.toString()));
          child.on('exit', (code) => resolve({ code, out }));
        });
      const [a, b] = await Promise.all([run(), run()]);
      expect(a.code).toBe(0);
      expect(b.code).toBe(0);
      const c = new Client({ connectionString: db.url });
      await c.connect();
      const { rows } = await c.query('SELECT name FROM schema_migrations');
      await c.end();
      expect(rows).toHaveLength(MIGRATIONS.length);
      // exactly one of the two applied them
      const applied = [a.out, b.out].filter((o) => /applied [1-9]/.test(o));
      expect(applied).toHaveLength(1);
    } finally {
      await db.drop();
    }
  });
});
