import { createHmac, timingSafeEqual } from 'node:crypto';
import { AppError } from '../common/app-error';

/**
 * Keyset paging of the audit log's lists: page sizes, the opaque cursor (the last row's time in
 * microseconds and its id, and what the page could not yet see), and the WHERE clause a search
 * builds with numbered parameters. Every list re-checks late commits: orders, messages, events
 * (sorted by id alone: an id is taken inside the writing transaction) and dead letters.
 *
 * Late commits: a row's time is its transaction's start (now()), so a transaction that commits
 * after a page was read can add a row that sorts above that page's last row; paging on by
 * "older than the last row" alone never showed it. The cursor therefore also carries the page's
 * MVCC snapshot and the start of the oldest transaction open when it was read (the horizon: no
 * row the snapshot could not see is older). The next page shows, above its own rows, every row
 * that sorts above the boundary, is not older than the horizon, and was put in the list by a
 * transaction that snapshot did not see (`created_xid`, a dead letter's `dead_xid`): each row
 * exactly once, whatever updates it has had. See docs/audit.md, "Paging".
 */

export interface Page<T> {
  items: T[];
  /** Opaque; pass back as `cursor` for the next (older) page. Absent on the last page. */
  nextCursor?: string;
  /**
   * How many of the first items committed after the page before was read (they sort above
   * it, so "next page" alone would never have shown them). Absent when none.
   */
  lateCommits?: number;
  /**
   * True when more rows committed late than a page holds (its size): the `lateCommits` newest
   * are shown; the others sort above the page before, so no later page shows them. The first
   * page, searched again, does.
   */
  moreLateCommits?: true;
  /**
   * Where the page stopped reading, when its search has no index and reads a bounded number
   * of rows per page (a message browser's text): the time of the last row it read. More may
   * match below it: `nextCursor` searches on from there. Absent when the page read all it needed.
   */
  searchedTo?: string;
}

export const DEFAULT_PAGE_SIZE = 50;
export const MAX_PAGE_SIZE = 200;

export function pageSize(limit: number | undefined): number {
  if (limit === undefined || !Number.isFinite(limit)) return DEFAULT_PAGE_SIZE;
  return Math.min(MAX_PAGE_SIZE, Math.max(1, Math.floor(limit)));
}

export interface Cursor {
  us: string;
  id: string;
  /** What the page that handed the cursor out could not see (lists with `created_xid`). */
  unseen?: { horizonUs: string; snapshot: string };
}

/**
 * Whose cursors a page hands out and takes: the list, and the database's cursor key
 * (audit_cursor_key, shared by every replica). A cursor is its text and an HMAC-SHA-256 of the
 * list and the text: its boundary, horizon and snapshot decide how much the next page reads,
 * so only one this list handed out is taken. Before, a cursor edited to name the epoch as its
 * boundary and horizon made the late-commit check read every row of the list on each request
 * (300,000 orders: 0.14 s; 3,000,000 events: 0.8 s), and one list's cursor was taken by another.
 */
export interface CursorSigner {
  /** One order's outbound documents are a list of their own: `order-outbound:<order id>`. */
  list: 'orders' | 'messages' | 'events' | 'dead-letters' | `order-outbound:${string}`;
  key: Buffer;
}

/** 128 bits of the HMAC: enough that no cursor is guessed, short enough for a link. */
const CURSOR_MAC_BYTES = 16;

function cursorMac(signer: CursorSigner, text: string): Buffer {
  return createHmac('sha256', signer.key)
    .update(`${signer.list}\n${text}`, 'utf8')
    .digest()
    .subarray(0, CURSOR_MAC_BYTES);
}

/** The cursor of `list` (signed) at `c`: also what one list hands out for another (a timeline's older events). */
export function encodeCursor(c: Cursor, signer: CursorSigner): string {
  const unseen = c.unseen ? `/${c.unseen.horizonUs}/${c.unseen.snapshot}` : '';
  const text = `${c.us}/${c.id}${unseen}`;
  return `${Buffer.from(text, 'utf8').toString('base64url')}.${cursorMac(signer, text).toString('base64url')}`;
}

/** The text of a cursor this list handed out (its HMAC checked), else undefined. */
function signedText(cursor: string, signer: CursorSigner): string | undefined {
  const dot = cursor.indexOf('.');
  if (dot < 0) return undefined;
  const text = Buffer.from(cursor.slice(0, dot), 'base64url').toString('utf8');
  const mac = Buffer.from(cursor.slice(dot + 1), 'base64url');
  const expected = cursorMac(signer, text);
  return mac.length === expected.length && timingSafeEqual(mac, expected) ? text : undefined;
}

/** The longest cursor handed out: a snapshot lists every transaction open when it was taken. */
export const MAX_CURSOR_LENGTH = 8192;

const CURSOR_IDS = {
  uuid: /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i,
  bigint: /^\d{1,18}$/,
} as const;

/**
 * The cursor of a list whose ids are `idType`, handed out by that list (`signer`). Anything
 * else (edited by hand, or taken from another list) is 400 `cursor is not valid`, never a
 * database cast error (500): the time must fit a bigint of microseconds and the id the list's
 * id type.
 */
export function decodeCursor(
  cursor: string | undefined,
  idType: keyof typeof CURSOR_IDS,
  signer: CursorSigner,
): Cursor | undefined {
  if (!cursor) return undefined;
  const text = signedText(cursor, signer) ?? '';
  // time/id, then (lists that re-check late commits) horizon/snapshot as pg_snapshot's text
  const match =
    /^(\d{1,18})\/([0-9a-f-]{1,36})(?:\/(\d{1,18})\/(\d{1,19}:\d{1,19}:(?:\d{1,19}(?:,\d{1,19})*)?))?$/i.exec(
      text,
    );
  if (
    !match ||
    !CURSOR_IDS[idType].test(match[2]!) ||
    (match[4] !== undefined && !isSnapshot(match[4]))
  ) {
    throw new AppError('bad_request', 'cursor is not valid');
  }
  return {
    us: match[1]!,
    id: match[2]!,
    ...(match[3] ? { unseen: { horizonUs: match[3], snapshot: match[4]! } } : {}),
  };
}

/**
 * Whether `text` is a pg_snapshot PostgreSQL reads (`xmin:xmax:xip,…`, 0 < xmin <= xmax, the
 * in-progress ids ascending within [xmin, xmax), all below 2^64): an edited one would
 * otherwise fail the query (500), not the cursor (400).
 */
function isSnapshot(text: string): boolean {
  const [xmin, xmax, list] = text.split(':') as [string, string, string];
  const lo = BigInt(xmin);
  const hi = BigInt(xmax);
  if (lo === 0n || hi < lo || hi >= 1n << 64n) return false;
  let last = lo;
  for (const x of list ? list.split(',').map(BigInt) : []) {
    if (x < last || x >= hi) return false;
    last = x;
  }
  return true;
}

/** A page row read by keysetPageSql: whether it is a late commit, and the read's snapshot. */
export interface LateCheckColumns {
  lateCommit?: boolean;
  snapshot?: string;
}

/**
 * The page of `limit` rows (read `limit + 1`), after the late commits keysetPageSql put first
 * (at most `limit` of them, read `limit + 1`: `moreLateCommits` when there were more);
 * `horizonUs` (transactionHorizon) goes into the cursor with the read's snapshot.
 */
export function toPage<R extends object, T>(
  rows: R[],
  limit: number,
  cursorOf: (row: R) => Cursor,
  map: (row: R) => T,
  signer: CursorSigner,
  horizonUs?: string,
): Page<T> {
  const isLate = (r: R) => (r as LateCheckColumns).lateCommit === true;
  const allLate = rows.filter(isLate);
  const late = allLate.slice(0, limit);
  const own = rows.filter((r) => !isLate(r));
  const more = own.length > limit;
  const items = own.slice(0, limit);
  const last = items[items.length - 1];
  const snapshot = last && (last as LateCheckColumns).snapshot;
  const unseen = horizonUs !== undefined && snapshot ? { horizonUs, snapshot } : undefined;
  return {
    items: [...late, ...items].map(map),
    ...(more && last
      ? {
          nextCursor: encodeCursor({ ...cursorOf(last), ...(unseen ? { unseen } : {}) }, signer),
        }
      : {}),
    ...(late.length ? { lateCommits: late.length } : {}),
    ...(allLate.length > limit ? { moreLateCommits: true as const } : {}),
  };
}

/**
 * The start of the oldest transaction open now, in microseconds since the epoch (now, if none):
 * no row a snapshot taken after this could not see is older, since every row's time is its
 * transaction's start. Read before the page, so that a transaction that ends in between counts.
 */
export const TRANSACTION_HORIZON_SQL = `SELECT floor(extract(epoch FROM least(clock_timestamp(), min(a.xact_start))) * 1000000)::bigint::text AS us
  FROM pg_stat_activity a WHERE a.datname = current_database() AND a.backend_type = 'client backend'`;

/** How a list is paged: its table, sort key and the column of the inserting transaction. */
export interface KeysetList {
  /** The columns read, `id` among them, and `"cursorUs"` (the time in microseconds) if timed. */
  columns: string;
  /** `<table> <alias>` */
  from: string;
  /** The sort key is (timeColumn, idColumn) newest first; without a time, idColumn alone. */
  timeColumn?: string;
  idColumn: string;
  idType: string;
  /**
   * When the row entered the list: its writing transaction's start (now()), so that no row a
   * page could not see is older than that page's horizon. The time column, if the list has one.
   */
  enteredColumn: string;
  /** The transaction that put the row in the list (xid8); NULL counts as seen by every page. */
  xidColumn: string;
  /**
   * A list sorted by its id alone whose `enteredColumn` has an index of its own (events: a BRIN
   * on `occurred_at`): the late rows are read through that index (not newer than the horizon,
   * then sorted), not by walking the id index down from the newest row to the boundary, which
   * read every row above it on each older page (200,000 rows for a page a month back).
   */
  lateThroughEntered?: boolean;
  /**
   * The same for the first page's own rows (a list sorted by id alone): when its time filter
   * holds fewer rows than come after it, read them through the entered column's index and sort
   * them, rather than walk the id index down through every newer row.
   */
  ownThroughEntered?: boolean;
}

/**
 * One page, newest first: the rows older than the cursor (at most `limit + 1`) and, first, the
 * rows that committed after the cursor's page was read yet sort above its boundary, newest first
 * and at most `limit + 1` of them too: a slow transaction may have written any number (a bulk
 * import), and a page is never more than twice its size.
 */
export function keysetPageSql(
  where: SearchWhere,
  cursor: Cursor | undefined,
  list: KeysetList,
  limit: number,
  /** The page's own rows only from this row up (its key and above): a bounded read (scanEndSql). */
  window?: { us: string; id: string },
): string {
  const { columns, from, timeColumn: t, idColumn: id, idType } = list;
  const select = (late: boolean) =>
    `SELECT ${columns}, ${late} AS "lateCommit", pg_current_snapshot()::text AS "snapshot" FROM ${from}`;
  const order = t ? `ORDER BY ${t} DESC, ${id} DESC` : `ORDER BY ${id} DESC`;
  const key = t ? `(${t}, ${id})` : id;
  const at = (c: { us: string; id: string }) =>
    t
      ? `(timestamptz 'epoch' + ${where.param(c.us)}::bigint * interval '1 microsecond', ${where.param(c.id)}::${idType})`
      : `${where.param(c.id)}::${idType}`;
  const inWindow = window ? [`${key} >= ${at(window)}`] : [];
  // `id + 0`: an expression the id index cannot serve, so the planner reads the rows through
  // the entered column's index (late rows: not older than the horizon) and sorts them
  const throughEntered = `ORDER BY ${id} + 0 DESC`;
  const ownOrder = !t && list.ownThroughEntered ? throughEntered : order;
  if (!cursor) return `${select(false)} ${where.sql(...inWindow)} ${ownOrder} LIMIT ${limit + 1}`;
  const boundary = at(cursor);
  // An older page walks the id index down from its boundary, which is in the range already (the
  // previous page's last row): through the entered column's index it read the whole range below
  // the boundary and sorted it (51,239 rows for page 2 of everything older than a month back).
  const own = `${select(false)} ${where.sql(`${key} < ${boundary}`, ...inWindow)} ${order} LIMIT ${limit + 1}`;
  if (!cursor.unseen) return own;
  const lateOrder = !t && list.lateThroughEntered ? throughEntered : order;
  const late = `${select(true)} ${where.sql(
    `${key} > ${boundary}`,
    `${list.enteredColumn} >= timestamptz 'epoch' + ${where.param(cursor.unseen.horizonUs)}::bigint * interval '1 microsecond'`,
    `NOT pg_visible_in_snapshot(${list.xidColumn}, ${where.param(cursor.unseen.snapshot)}::pg_snapshot)`,
  )} ${lateOrder} LIMIT ${limit + 1}`;
  // ids are read as text where they are numbers: sorted as their type
  const outer = t ? `p."cursorUs"::bigint DESC, p.id::${idType} DESC` : `p.id::${idType} DESC`;
  return `SELECT * FROM ((${late}) UNION ALL (${own})) p
    ORDER BY p."lateCommit" DESC, ${outer}`;
}

/**
 * The row `rows` rows down the list from the cursor (newest first, through the list's index,
 * `where` holding only the filters that index serves), with the read's snapshot: the end of a
 * bounded read for a filter no index serves. No row: fewer are left, the read is not cut.
 */
export function scanEndSql(
  where: SearchWhere,
  cursor: Cursor | undefined,
  list: KeysetList & { timeColumn: string },
  rows: number,
): string {
  const { timeColumn: t, idColumn: id, idType } = list;
  if (cursor) {
    where.add(
      `(${t}, ${id}) < (timestamptz 'epoch' + ${where.param(cursor.us)}::bigint * interval '1 microsecond', ${where.param(cursor.id)}::${idType})`,
    );
  }
  return `SELECT (extract(epoch FROM ${t}) * 1000000)::bigint::text AS us, ${id}::text AS id,
                 ${t} AS at, pg_current_snapshot()::text AS snapshot
            FROM ${list.from} ${where.sql()}
           ORDER BY ${t} DESC, ${id} DESC OFFSET ${rows - 1} LIMIT 1`;
}

/** A row where a bounded read stopped (scanEndSql). */
export interface ScanEnd {
  us: string;
  id: string;
  at: Date | string;
  snapshot: string;
}

/**
 * The page of a bounded read that ended at `end` before filling: it goes on from there (its
 * cursor is `end`, with the snapshot of the page's read, or, if it found nothing, of the read
 * that found `end`: then nothing that read could not see was found either), and says how far it
 * read. A page that filled first keeps its own cursor (its last row is above `end`).
 */
export function continuedAt<T>(
  page: Page<T>,
  end: ScanEnd | undefined,
  horizonUs: string,
  pageSnapshot: string | undefined,
  signer: CursorSigner,
): Page<T> {
  if (!end || page.nextCursor) return page;
  const unseen = { horizonUs, snapshot: pageSnapshot ?? end.snapshot };
  return {
    ...page,
    nextCursor: encodeCursor({ us: end.us, id: end.id, unseen }, signer),
    searchedTo: (end.at instanceof Date ? end.at : new Date(end.at)).toISOString(),
  };
}

/** A search's WHERE clause, built filter by filter; every value goes in as the next parameter. */
export class SearchWhere {
  readonly params: unknown[] = [];
  private readonly conditions: string[] = [];

  /** Adds `value` as the next parameter: its placeholder (`$n`). */
  param(value: unknown): string {
    this.params.push(value);
    return `$${this.params.length}`;
  }

  add(condition: string): void {
    this.conditions.push(condition);
  }

  /** `WHERE a AND b` (and `more`, for this query only), or nothing when there is no filter. */
  sql(...more: string[]): string {
    const all = [...this.conditions, ...more];
    return all.length ? `WHERE ${all.join(' AND ')}` : '';
  }
}
