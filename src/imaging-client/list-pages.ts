import { PeerBase, PeerUrlError } from '../common/peer-url';
import { ImagingClientError } from './imaging-client.error';
import { MAX_LIST_ENTRIES } from './upstream-schemas';

/**
 * The contract describes `GET /list-orders` and `GET /reports` as one answer holding every
 * entry, and names no paging. Should the service page them anyway, reading only the first page
 * would make followed orders look finished and let a duplicate slip past the correlation
 * lookup, so the client follows whatever next-page marker an answer carries (liberal in what
 * it accepts, docs/upstream-assumptions.md "paging"):
 *
 * - a next link: `next`, `next_page`, `nextPage`, `next_url`, `nextUrl`, `links.next`,
 *   `_links.next.href`, `pagination.next`, `paging.next` — absolute, a path, or `?query`;
 *   followed only within IMAGING_BASE_URL (PeerBase), never to another host;
 * - a token: `nextPageToken` / `next_page_token` (sent back as `pageToken`), `next_cursor` /
 *   `nextCursor` / `cursor` / `pagination.next_cursor` (sent back as `cursor`), a bare token in
 *   a next-link field (as `cursor`), a page number (as `page`);
 * - `has_more: false` / `hasMore: false` ends the list whatever else is there.
 *
 * At most MAX_LIST_PAGES pages and MAX_LIST_ENTRIES entries are read, and a page seen before
 * ends in an error: a partial list is never taken for the whole one.
 */
export const MAX_LIST_PAGES = 100;

export interface PageRequest {
  path: string;
  query: Record<string, string>;
}

const LINK_FIELDS = ['next', 'next_page', 'nextPage', 'next_url', 'nextUrl'] as const;
const PAGE_TOKEN_FIELDS = ['nextPageToken', 'next_page_token'] as const;
const CURSOR_FIELDS = ['next_cursor', 'nextCursor', 'cursor'] as const;
const MAX_TOKEN = 4096;

function obj(v: unknown): Record<string, unknown> | undefined {
  return v && typeof v === 'object' && !Array.isArray(v)
    ? (v as Record<string, unknown>)
    : undefined;
}

function str(v: unknown): string | undefined {
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return String(v);
  return typeof v === 'string' && v.trim() !== '' ? v.trim() : undefined;
}

/** The next page to read after `current`, or null when the answer names none. */
export function nextPageOf(
  body: Record<string, unknown>,
  current: PageRequest,
  base: PeerBase,
  operation: string,
): PageRequest | null {
  if (body.has_more === false || body.hasMore === false) return null;
  const links = obj(body.links);
  const halLinks = obj(body._links);
  const pagination = obj(body.pagination) ?? obj(body.paging);
  const linkCandidates: unknown[] = [
    ...LINK_FIELDS.map((f) => body[f]),
    links?.next,
    obj(links?.next)?.href,
    obj(halLinks?.next)?.href,
    pagination?.next,
  ];
  for (const candidate of linkCandidates) {
    const value = str(candidate);
    if (value === undefined) continue;
    if (/^\d+$/.test(value)) return withParam(current, 'page', value, operation);
    if (/^(?:[a-z][a-z0-9+.-]*:|\/|\?)/i.test(value) || /[/?]/.test(value))
      return followLink(value, current, base, operation);
    return withParam(current, 'cursor', value, operation);
  }
  for (const field of PAGE_TOKEN_FIELDS) {
    const value = str(body[field]);
    if (value !== undefined) return withParam(current, 'pageToken', value, operation);
  }
  for (const field of CURSOR_FIELDS) {
    const value = str(body[field]) ?? str(pagination?.[field]);
    if (value !== undefined) return withParam(current, 'cursor', value, operation);
  }
  return null;
}

function withParam(
  current: PageRequest,
  name: string,
  value: string,
  operation: string,
): PageRequest {
  if (value.length > MAX_TOKEN)
    throw new ImagingClientError('invalid_response', operation, 'next-page token too long');
  return { path: current.path, query: { ...current.query, [name]: value } };
}

function followLink(
  reference: string,
  current: PageRequest,
  base: PeerBase,
  operation: string,
): PageRequest {
  // `?page=2` continues the current path; anything else resolves under the base.
  const absolute = reference.startsWith('?')
    ? `${base.href}${current.path}${reference}`
    : reference;
  let url: URL;
  try {
    url = base.resolve(absolute);
  } catch (error) {
    const why = error instanceof PeerUrlError ? error.reason : 'unparseable';
    throw new ImagingClientError(
      'invalid_response',
      operation,
      `next-page link refused (${why}): it must stay within IMAGING_BASE_URL`,
    );
  }
  const basePath = new URL(base.href).pathname.replace(/\/$/, '');
  const path = url.pathname.slice(basePath.length) || '/';
  const query: Record<string, string> = {};
  for (const [k, v] of url.searchParams) query[k] = v;
  return { path, query };
}

/** Reads every page of a list answer, bounded, refusing loops. */
export async function readAllPages<T>(
  first: PageRequest,
  operation: string,
  base: PeerBase,
  fetchPage: (
    page: PageRequest,
    alreadyRead: number,
  ) => Promise<{ items: T[]; body: Record<string, unknown> }>,
): Promise<{ items: T[]; pages: number }> {
  const items: T[] = [];
  const seen = new Set<string>();
  let page: PageRequest | null = first;
  for (let n = 1; page; n++) {
    if (n > MAX_LIST_PAGES) {
      throw new ImagingClientError(
        'invalid_response',
        operation,
        `the list has more than ${MAX_LIST_PAGES} pages; not read further`,
      );
    }
    const key = `${page.path}?${new URLSearchParams(Object.entries(page.query).sort()).toString()}`;
    if (seen.has(key))
      throw new ImagingClientError('invalid_response', operation, 'the next page repeats a page');
    seen.add(key);
    const answer = await fetchPage(page, items.length);
    if (items.length + answer.items.length > MAX_LIST_ENTRIES)
      throw new ImagingClientError(
        'invalid_response',
        operation,
        `the list holds more than ${MAX_LIST_ENTRIES} entries; not read further`,
      );
    // One by one: `push(...items)` passes every entry as an argument and overflows the stack
    // for a large page (a 32 MiB /list-orders failed with a RangeError, not a typed error).
    for (const item of answer.items) items.push(item);
    page = nextPageOf(answer.body, page, base, operation);
  }
  return { items, pages: seen.size };
}
