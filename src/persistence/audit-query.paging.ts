import { AppError } from '../common/app-error';

/**
 * Keyset paging of the audit log's lists: page sizes, the opaque cursor (the last row's time in
 * microseconds and its id), and the WHERE clause a search builds with numbered parameters.
 */

export interface Page<T> {
  items: T[];
  /** Opaque; pass back as `cursor` for the next (older) page. Absent on the last page. */
  nextCursor?: string;
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
}

function encodeCursor(c: Cursor): string {
  return Buffer.from(`${c.us}/${c.id}`, 'utf8').toString('base64url');
}

const CURSOR_IDS = {
  uuid: /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i,
  bigint: /^\d{1,18}$/,
} as const;

/**
 * The cursor of a list whose ids are `idType`. Anything else (edited by hand, or taken from
 * another list) is 400 `cursor is not valid`, never a database cast error (500): the time
 * must fit a bigint of microseconds and the id the list's id type.
 */
export function decodeCursor(
  cursor: string | undefined,
  idType: keyof typeof CURSOR_IDS,
): Cursor | undefined {
  if (!cursor) return undefined;
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  const match = /^(\d{1,18})\/([0-9a-f-]{1,36})$/i.exec(text);
  if (!match || !CURSOR_IDS[idType].test(match[2]!)) {
    throw new AppError('bad_request', 'cursor is not valid');
  }
  return { us: match[1]!, id: match[2]! };
}

export function toPage<R, T>(
  rows: R[],
  limit: number,
  cursorOf: (row: R) => Cursor,
  map: (row: R) => T,
): Page<T> {
  const more = rows.length > limit;
  const items = rows.slice(0, limit);
  const last = items[items.length - 1];
  return {
    items: items.map(map),
    ...(more && last ? { nextCursor: encodeCursor(cursorOf(last)) } : {}),
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

  /**
   * Rows older than the cursor on (`timeColumn`, `idColumn`), the order of the list's index;
   * `idType` is the id's SQL type.
   */
  olderThan(cursor: Cursor, timeColumn: string, idColumn: string, idType: string): void {
    this.add(
      `(${timeColumn}, ${idColumn}) < (timestamptz 'epoch' + ${this.param(cursor.us)}::bigint * interval '1 microsecond', ${this.param(cursor.id)}::${idType})`,
    );
  }

  /** `WHERE a AND b`, or nothing when no filter was given. */
  sql(): string {
    return this.conditions.length ? `WHERE ${this.conditions.join(' AND ')}` : '';
  }
}
