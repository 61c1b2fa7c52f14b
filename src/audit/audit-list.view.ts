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
 * Above a page that starts with rows committed after the page before it was read (a slow
 * transaction's: they sort above that page, so they are shown here, once).
 */
export function lateCommitsNote(count: number | undefined, noun: string): string {
  if (!count) return '';
  const what = count === 1 ? `The first ${noun}` : `The first ${count} ${noun}s`;
  return `<p class="muted" role="note">${what} committed after the page before was read; ${count === 1 ? 'it is' : 'they are'} newer than that page's, so ${count === 1 ? 'it is' : 'they are'} shown here.</p>`;
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
