import { isoInstant } from './audit-api.dto';
import { h, hExact } from './audit-page.layout';

/**
 * The pieces of the list pages' filter forms (orders, messages): `prefix` keeps each page's
 * element ids its own, `filters` is what the form was submitted with.
 */
export function filterText(
  prefix: string,
  filters: Record<string, string>,
  name: string,
  label: string,
  hint = '',
): string {
  return `<label for="${prefix}-${name}">${h(label)}<input id="${prefix}-${name}" type="text" name="${name}" value="${hExact(filters[name] ?? '')}" autocomplete="off" spellcheck="false"${hint ? ` placeholder="${h(hint)}"` : ''}></label>`;
}

export function filterSelect(
  prefix: string,
  filters: Record<string, string>,
  name: string,
  label: string,
  values: readonly string[],
): string {
  return `<label for="${prefix}-${name}">${h(label)}<select id="${prefix}-${name}" name="${name}"><option value="">any</option>${values
    .map((v) => `<option${filters[name] === v ? ' selected' : ''}>${h(v)}</option>`)
    .join('')}</select></label>`;
}

/**
 * A `from`/`to` filter as its datetime-local field must hold it: the instant searched for, in
 * UTC as the field's label says, to the minute unless it has seconds. The search takes a date,
 * a `Z` or an offset (`2026-11-25`, `…T10:00+01:00`), which such a field cannot show: before,
 * the field was blank while the range applied, and the next Search dropped it. A value that
 * is not an instant is left as given (its error is shown above the list).
 */
export function instantFieldValue(given: string | undefined): string {
  if (!given) return '';
  const at = isoInstant(given.trim());
  if (!at) return given;
  const iso = at.toISOString().slice(0, 23);
  if (iso.endsWith(':00.000')) return iso.slice(0, 16);
  return iso.endsWith('.000') ? iso.slice(0, 19) : iso;
}

/**
 * Above a page that starts with rows committed after the page before it was read (a slow
 * transaction's: they sort above that page, so they are shown here, once). `firstPage` when
 * more committed than the page holds: the newest are shown, and the others only by searching
 * again from the first page (where they are, being newer than the page before).
 */
export function lateCommitsNote(
  count: number | undefined,
  noun: string,
  firstPage?: string,
): string {
  if (!count) return '';
  if (firstPage) {
    return `<p class="notice" role="note">More than ${count} ${noun}s committed after the page before was read; the ${count} newest of them are shown here. The others are newer than the page before, so the next pages do not show them: <a href="${h(firstPage)}">search again from the first page</a> to see them.</p>`;
  }
  const what = count === 1 ? `The first ${noun}` : `The first ${count} ${noun}s`;
  return `<p class="muted" role="note">${what} committed after the page before was read; ${count === 1 ? 'it is' : 'they are'} newer than that page's, so ${count === 1 ? 'it is' : 'they are'} shown here.</p>`;
}

/** The list's first page with the same filters (no cursor). */
export function firstPageHref(path: string, filters: Record<string, string>): string {
  const query = new URLSearchParams(
    Object.entries(filters).filter(([k, v]) => v !== '' && k !== 'cursor'),
  ).toString();
  return query ? `${path}?${query}` : path;
}

/** The pager's link to the next (older) page: the same filters, and the page's cursor. */
export function olderPageLink(
  path: string,
  filters: Record<string, string>,
  nextCursor: string | undefined,
  text: string,
): string {
  if (!nextCursor) return '';
  const query = new URLSearchParams(
    Object.entries(filters).filter(([k, v]) => v !== '' && k !== 'cursor'),
  );
  return `<a class="secondary" href="${path}?${h(new URLSearchParams([...query, ['cursor', nextCursor]]).toString())}">${text}</a>`;
}
