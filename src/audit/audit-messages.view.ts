import type { MessageView } from './audit-presenter';
import { BULK_REPLAY_MAX, type BulkReplayResult } from './dead-letter-bulk-replay';
import { type MessageRow, type OutboxRow, TEXT_SCAN_ROWS } from './audit-query.service';
import {
  PageContext,
  h,
  jsonDetails,
  layout,
  outcomeBadge,
  rawBlock,
  revealForm,
  timelineList,
  when,
} from './audit-page.layout';
import {
  filterSelect,
  filterText,
  instantFieldValue,
  firstPageHref,
  lateCommitsNote,
  olderPageLink,
} from './audit-list.view';

export function messagePage(ctx: PageContext, view: MessageView, orderIds: string[]): string {
  const facts: Array<[string, string | number | null]> = [
    ['Message id', view.id],
    ['Received', view.receivedAt],
    ['Transport', view.transport],
    ['Sender', view.sender],
    ['Type', view.messageType],
    ['MSH-10', view.messageControlId],
    ['Outcome', view.outcome],
    ['Answer', view.responseCode],
    ['Size', `${view.bytes} bytes`],
  ];
  return layout(
    { ...ctx, current: 'messages' },
    `Message ${view.messageControlId ?? view.id}`,
    `<p><a href="/audit/messages">← Messages</a></p>
    <h1>Inbound message ${h(view.messageControlId ?? view.id)} ${outcomeBadge(view.outcome)}</h1>
    ${revealForm(ctx, `/audit/messages/${view.id}`, view.masked)}
    ${reprocessLinks(view)}
    ${reprocessForm(ctx, view)}
    <section class="card"><dl class="facts">${facts
      .filter(([, v]) => v !== null && v !== '')
      .map(([k, v]) => `<div><dt>${h(k)}</dt><dd>${h(v)}</dd></div>`)
      .join('')}</dl>
      ${orderIds.length ? `<p>Orders: ${orderIds.map((id) => `<a class="mono" href="/audit/orders/${h(id)}">${h(id)}</a>`).join(', ')}</p>` : ''}
      ${view.quirks.length ? `<div class="notice warn"><strong>Tolerated quirks:</strong> ${view.quirks.map((q) => `${h(q.code)} (${h(q.detail)})`).join('; ')}</div>` : ''}
      ${view.error ? jsonDetails(view.error, 'error') : ''}
    </section>
    <div class="grid2">
      <section class="card" aria-labelledby="raw-h"><h2 id="raw-h">As received</h2>${rawBlock(view.raw, 'Inbound message')}</section>
      <section class="card" aria-labelledby="ans-h"><h2 id="ans-h">Our answer</h2>${view.response ? rawBlock(view.response, 'Answer') : '<p class="muted">No answer stored.</p>'}</section>
    </div>
    <section class="card" aria-labelledby="ev-h"><h2 id="ev-h">Events</h2>${timelineList(view.events)}</section>`,
  );
}

export function messageListPage(
  ctx: PageContext,
  input: {
    filters: Record<string, string>;
    messages: MessageRow[];
    nextCursor?: string;
    lateCommits?: number;
    moreLateCommits?: boolean;
    /** Where a text search stopped reading (TEXT_SCAN_ROWS a page); Older searches on. */
    searchedTo?: string;
    problem?: string;
  },
): string {
  const f = input.filters;
  const rows = input.messages
    .map(
      (m) => `<tr>
        <td>${when(m.receivedAt)}</td>
        <td class="mono"><a href="/audit/messages/${h(m.id)}">${h(m.messageType ?? m.transport)}</a></td>
        <td class="mono">${h(m.messageControlId ?? '')}</td>
        <td>${h(m.sender ?? '')}</td>
        <td>${h(m.transport)}</td>
        <td>${outcomeBadge(m.outcome)}</td>
        <td class="mono">${h(m.responseCode ?? '')}</td>
        <td>${h(m.answerText ?? '')}</td>
      </tr>`,
    )
    .join('');
  const next = olderPageLink('/audit/messages', f, input.nextCursor, 'Older messages →');
  return layout(
    { ...ctx, current: 'messages' },
    'Messages',
    `<h1>Inbound messages and requests</h1>
    ${input.problem ? `<div class="notice err" role="alert">${h(input.problem)}</div>` : ''}
    <section class="card" aria-labelledby="mf-h"><h2 id="mf-h" class="visually-hidden">Filters</h2>
      <form class="filters" method="get" action="/audit/messages" role="search">
        <label for="m-from">Received from (UTC)<input id="m-from" type="datetime-local" name="from" value="${h(instantFieldValue(f.from))}"></label>
        <label for="m-to">Received before (UTC)<input id="m-to" type="datetime-local" name="to" value="${h(instantFieldValue(f.to))}"></label>
        ${filterText('m', f, 'sender', 'Sender', 'RADIS1^IHEDEMO')}
        ${filterSelect('m', f, 'transport', 'Transport', ['mllp', 'fhir-rest', 'fhir-subscription'])}
        ${filterSelect('m', f, 'outcome', 'Outcome', ['accepted', 'duplicate', 'refused', 'rejected', 'error'])}
        ${filterText('m', f, 'answerCode', 'Answer code', 'AA, AE, AR, 400…')}
        ${filterText('m', f, 'text', 'Answer text contains')}
        ${filterText('m', f, 'msh10', 'MSH-10 control id')}
        <div class="actions"><button class="primary" type="submit">Search</button><a class="secondary" href="/audit/messages">Clear</a></div>
      </form>
    </section>
    <section class="card" aria-labelledby="ml-h">
      <h2 id="ml-h">${input.messages.length ? `${input.messages.length}${input.nextCursor ? '+' : ''} message${input.messages.length === 1 ? '' : 's'}` : input.searchedTo ? 'No messages match so far' : 'No messages match'}</h2>
      ${input.searchedTo ? `<p class="notice" role="note">At most ${TEXT_SCAN_ROWS.toLocaleString('en')} messages are read per page for a text; this page read back to ${when(input.searchedTo)}. “Older messages” searches on from there.</p>` : ''}
      ${lateCommitsNote(input.lateCommits, 'message', input.moreLateCommits ? firstPageHref('/audit/messages', f) : undefined)}
      ${
        input.messages.length
          ? `<table><thead><tr><th scope="col">Received</th><th scope="col">Type</th><th scope="col">MSH-10 / id</th><th scope="col">Sender</th><th scope="col">Transport</th><th scope="col">Outcome</th><th scope="col">Answer</th><th scope="col">Why</th></tr></thead><tbody>${rows}</tbody></table>`
          : '<p class="muted">Widen the time range or clear a filter.</p>'
      }
      <div class="pager"><span class="muted">Newest first; refused messages included</span>${next}</div>
    </section>`,
  );
}

/** The message a reprocess became, or the message this one reprocesses (message.reprocessed). */
function reprocessLinks(view: MessageView): string {
  const links = new Map<string, string>();
  for (const e of view.events) {
    if (e.kind !== 'message.reprocessed') continue;
    const original = e.detail.originalMessageId;
    const became = e.detail.reprocessedMessageId;
    if (typeof original === 'string' && original !== view.id)
      links.set(
        original,
        `Reprocess of <a class="mono" href="/audit/messages/${h(original)}">${h(original)}</a>`,
      );
    if (typeof became === 'string' && became !== view.id)
      links.set(
        became,
        `Reprocessed as <a class="mono" href="/audit/messages/${h(became)}">${h(became)}</a>`,
      );
  }
  return links.size
    ? `<div class="notice" role="status">${[...links.values()].join('<br>')}</div>`
    : '';
}

/** An admin's reprocess of a refused message (after the site's mapping changed): a reason, POSTed with the CSRF token. */
function reprocessForm(ctx: PageContext, view: MessageView): string {
  if (ctx.role !== 'admin' || view.outcome === 'accepted') return '';
  if (view.transport !== 'mllp' && view.transport !== 'fhir-rest') return '';
  return `<form class="notice" method="post" action="/audit/messages/${h(view.id)}/reprocess">
      <input type="hidden" name="_csrf" value="${h(ctx.csrfToken ?? '')}">
      <div class="actions wrap">
        <span>Refused. After the site's mapping changed, run it again through its front door (once: a second reprocess answers the first result).</span>
        <label for="reprocess-reason" class="visually-hidden">Reason to reprocess</label>
        <input id="reprocess-reason" type="text" name="reason" required minlength="3" maxlength="500" placeholder="Reason (recorded in the audit log)" class="reason">
        <button class="secondary" type="submit">Reprocess</button>
      </div>
    </form>`;
}

export function deadLettersPage(
  ctx: PageContext,
  input: {
    /** The paging parameters the page was asked with (`limit`, `cursor`). */
    filters: Record<string, string>;
    items: OutboxRow[];
    nextCursor?: string;
    lateCommits?: number;
    moreLateCommits?: boolean;
    replayed?: string;
    /** Why the parameters could not be applied (shown above the list). */
    problem?: string;
  },
): string {
  const rows = input.items
    .map(
      (d) => `<tr>
        <td>${d.orderId ? `<a class="mono" href="/audit/orders/${h(d.orderId)}">${h(d.accessionNumber ?? '(no accession)')}</a>` : ''}</td>
        <td class="mono">${h(d.placerOrderNumber ?? '')}</td>
        <td>${h(d.kind)}</td>
        <td>${h(d.destination)}</td>
        <td>${h(d.attempts)}</td>
        <td>${h(d.lastError ?? '')}</td>
        <td>${when(d.updatedAt)}</td>
        <td>${ctx.role === 'admin' ? `<a class="secondary" href="/audit/dead-letters/${h(d.id)}/replay">Replay…</a>` : ''}</td>
      </tr>`,
    )
    .join('');
  return layout(
    { ...ctx, current: 'dead-letters' },
    'Dead letters',
    `<h1>Dead letters</h1>
    ${ctx.role === 'admin' ? '<p><a class="secondary" href="/audit/dead-letters/replay">Replay many…</a></p>' : ''}
    ${input.replayed ? `<div class="notice ok" role="status">Outbound document ${h(input.replayed)} is queued again; the replay is recorded in the audit log.</div>` : ''}
    <section class="card">
      ${input.problem ? `<div class="notice err" role="alert">${h(input.problem)}</div>` : ''}
      ${lateCommitsNote(input.lateCommits, 'dead letter', input.moreLateCommits ? firstPageHref('/audit/dead-letters', input.filters) : undefined)}
      ${
        input.items.length
          ? `<table><thead><tr><th scope="col">Accession</th><th scope="col">Placer</th><th scope="col">Document</th><th scope="col">Destination</th><th scope="col">Attempts</th><th scope="col">Last error</th><th scope="col">Gave up</th><th scope="col"><span class="visually-hidden">Action</span></th></tr></thead><tbody>${rows}</tbody></table>`
          : input.problem
            ? ''
            : '<p class="muted">No dead letters. Everything was delivered or is still being retried.</p>'
      }
      <div class="pager"><span class="muted">Most recent first</span>${olderPageLink('/audit/dead-letters', input.filters, input.nextCursor, 'Older →')}</div>
    </section>`,
  );
}

/**
 * The bulk replay form (admins): which dead letters (destination, text of the reason, when
 * given up, how many at most), what a dry run of them found, and a reason with a ticked
 * confirmation; after a replay, what came of each.
 */
export function bulkReplayPage(
  ctx: PageContext,
  input: {
    filters: Record<string, string>;
    /** The dry run of the filters, or the replay's outcome (`done`). */
    result?: BulkReplayResult;
    done?: boolean;
    problem?: string;
  },
): string {
  const f = input.filters;
  const field = (name: string, label: string, type = 'text') =>
    `<label for="bulk-${name}">${h(label)}<input id="bulk-${name}" name="${name}" type="${type}" value="${h(f[name] ?? '')}"></label>`;
  const r = input.result;
  const letters = r?.letters.length
    ? `<table><thead><tr><th scope="col">Outbox id</th><th scope="col">Document</th><th scope="col">Destination</th><th scope="col">Gave up</th><th scope="col">Last error</th><th scope="col">Outcome</th></tr></thead><tbody>${r.letters
        .map(
          (
            l,
          ) => `<tr><td>${l.orderId ? `<a class="mono" href="/audit/orders/${h(l.orderId)}">${h(l.id)}</a>` : h(l.id)}</td>
          <td>${h(l.kind)}</td><td>${h(l.destination)}</td><td>${when(l.updatedAt)}</td><td>${h(l.lastError ?? '')}</td>
          <td>${h(l.outcome)}${l.note ? ` <span class="muted">${h(l.note)}</span>` : ''}</td></tr>`,
        )
        .join('')}</tbody></table>`
    : '';
  const summary = r
    ? input.done
      ? `<div class="notice ok" role="status">${h(r.letters.filter((l) => l.outcome === 'queued').length)} dead letters are queued again; each replay is recorded in the audit log. ${h(r.remaining)} matching letters are left.</div>`
      : `<div class="notice info" role="status">${h(r.matched)} dead letters match; this replay takes the ${h(r.letters.length)} longest dead.</div>`
    : '';
  const hidden = ['destination', 'error', 'from', 'to', 'limit']
    .filter((k) => f[k])
    .map((k) => `<input type="hidden" name="${k}" value="${h(f[k])}">`)
    .join('');
  return layout(
    { ...ctx, current: 'dead-letters' },
    'Replay many dead letters',
    `<p><a href="/audit/dead-letters">← Dead letters</a></p>
    <h1>Replay many dead letters</h1>
    <section class="card" aria-labelledby="which-h"><h2 id="which-h">Which</h2>
      <form method="get" action="/audit/dead-letters/replay" class="stack">
        ${field('destination', 'Destination (e.g. ris-hl7)')}
        ${field('error', 'Text in the last error')}
        ${field('from', 'Given up from (UTC)', 'datetime-local')}
        ${field('to', 'Given up before (UTC)', 'datetime-local')}
        ${field('limit', `At most (1 to ${BULK_REPLAY_MAX})`)}
        <div class="actions"><button type="submit">Count</button></div>
      </form>
    </section>
    <section class="card" aria-labelledby="found-h"><h2 id="found-h">${input.done ? 'Replayed' : 'Found'}</h2>
      ${input.problem ? `<div class="notice err" role="alert">${h(input.problem)}</div>` : ''}
      ${summary}${letters}
      ${
        r && !input.done && r.letters.some((l) => l.outcome === 'would-replay')
          ? `<form method="post" action="/audit/dead-letters/replay" class="stack">
        <input type="hidden" name="_csrf" value="${h(ctx.csrfToken ?? '')}">${hidden}
        <label for="bulk-reason">Reason for the replay<textarea id="bulk-reason" name="reason" required minlength="3" maxlength="500"></textarea></label>
        <label class="check" for="bulk-confirm"><input id="bulk-confirm" type="checkbox" name="confirm" value="yes" required> I confirm that these documents should be sent again</label>
        <div class="actions"><button class="danger" type="submit">Replay these</button><a class="secondary" href="/audit/dead-letters">Cancel</a></div>
      </form>`
          : ''
      }
    </section>`,
  );
}

export function replayConfirmPage(ctx: PageContext, d: OutboxRow, error?: string): string {
  return layout(
    { ...ctx, current: 'dead-letters' },
    `Replay ${d.id}`,
    `<p><a href="/audit/dead-letters">← Dead letters</a></p>
    <h1>Replay outbound document ${h(d.id)}</h1>
    <section class="card">
      <dl class="facts">
        <div><dt>Document</dt><dd>${h(d.kind)}</dd></div>
        <div><dt>Destination</dt><dd>${h(d.destination)}</dd></div>
        <div><dt>Attempts</dt><dd>${h(d.attempts)}</dd></div>
        <div><dt>Status</dt><dd>${h(d.status)}</dd></div>
        <div><dt>Last error</dt><dd>${h(d.lastError ?? '–')}</dd></div>
      </dl>
    </section>
    <section class="card" aria-labelledby="confirm-h"><h2 id="confirm-h">Confirm</h2>
      ${error ? `<div class="notice err" role="alert">${h(error)}</div>` : ''}
      <p>The document goes back to the queue with its attempts reset and is sent again at once. Your name and reason are recorded in the audit log.</p>
      <form method="post" action="/audit/dead-letters/${h(d.id)}/replay" class="stack">
        <input type="hidden" name="_csrf" value="${h(ctx.csrfToken ?? '')}">
        <label for="reason">Reason<textarea id="reason" name="reason" required minlength="3" maxlength="500"></textarea></label>
        <label class="check" for="confirm"><input id="confirm" type="checkbox" name="confirm" value="yes" required> I confirm that this document should be sent again</label>
        <div class="actions"><button class="danger" type="submit">Replay now</button><a class="secondary" href="/audit/dead-letters">Cancel</a></div>
      </form>
    </section>`,
  );
}
