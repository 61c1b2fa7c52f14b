#!/usr/bin/env node
/**
 * Services hold no SQL (DESIGN.md §2, issue #16): every `.query(` call in src/ lives in a
 * file named *.repository.ts, or in one of the few places below that are SQL by nature.
 * Run by `npm run check`; exits 1 listing each call found elsewhere (file:line).
 */
const { readdirSync, readFileSync } = require('node:fs');
const { join, relative, sep } = require('node:path');

const ROOT = join(__dirname, '..');
const SRC = join(ROOT, 'src');

/** Allowed for good: the migration runner, the embedded server, the job queue's internals. */
const ALLOWED = [
  'src/persistence/migrator.ts',
  'src/persistence/embedded-postgres.ts',
  'src/common/schema-lock.ts',
  'src/jobs/',
];

/**
 * PENDING: folders whose SQL is being moved to repositories on other branches (issue #16).
 * The lead empties this list after merging them; a folder listed here that has no call left
 * is reported so that it is not forgotten.
 */
const PENDING = [];

/** `.query(`, also with a type argument (`.query<Row[]>(`) or a line break before `(`. */
const QUERY_CALL = /\.query\s*(?:<[^>]*>\s*)?\(/g;

function filesUnder(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return filesUnder(path);
    return /\.(ts|js|cjs|mjs)$/.test(entry.name) ? [path] : [];
  });
}

const posix = (path) => relative(ROOT, path).split(sep).join('/');
const under = (file, prefixes) =>
  prefixes.find((p) => (p.endsWith('/') ? file.startsWith(p) : file === p));

const offences = [];
const pendingCalls = new Map(PENDING.map((p) => [p, 0]));
for (const path of filesUnder(SRC)) {
  const file = posix(path);
  if (/\.repository\.ts$/.test(file) || /\.spec\.ts$/.test(file) || under(file, ALLOWED)) continue;
  const text = readFileSync(path, 'utf8');
  const lines = [];
  for (const match of text.matchAll(QUERY_CALL)) {
    lines.push(text.slice(0, match.index).split('\n').length);
  }
  if (lines.length === 0) continue;
  const pending = under(file, PENDING);
  if (pending) {
    pendingCalls.set(pending, pendingCalls.get(pending) + lines.length);
    continue;
  }
  for (const line of lines) {
    offences.push(`${file}:${line}: ${text.split('\n')[line - 1].trim()}`);
  }
}

for (const [folder, calls] of pendingCalls) {
  if (calls === 0) {
    console.log(
      `check-sql-placement: PENDING ${folder} has no .query( left: remove it from the list`,
    );
  }
}
if (offences.length > 0) {
  console.error(
    `check-sql-placement: ${offences.length} .query( call(s) outside a *.repository.ts file ` +
      '(move the statement into a repository in src/persistence/):',
  );
  for (const offence of offences) console.error(`  ${offence}`);
  process.exit(1);
}
console.log('check-sql-placement: every .query( call in src/ is in a repository');
