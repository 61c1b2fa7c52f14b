import type {
  OrderDetailView,
  OutboundItem,
  PeerAnswerView,
  RawView,
  Waiting,
} from './audit-presenter';
import {
  type EventRow,
  type MessageRow,
  type OrderRow,
  type OutboxRow,
  TIMELINE_HEAD,
  TIMELINE_LIMIT,
} from './audit-query.service';
import type { OrderDocumentRow } from '../persistence/audit-query.repository';
import {
  PageContext,
  h,
  jsonDetails,
  layout,
  lineageTable,
  outcomeBadge,
  rawBlock,
  revealForm,
  stateBadge,
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

const FILTER_FIELDS: Array<[string, string]> = [
  ['accession', 'Accession number'],
  ['patientId', 'Patient identifier'],
  ['placer', 'Placer order number'],
  ['filler', 'Filler order number'],
  ['msh10', 'MSH-10 control id'],
  ['studyInstanceUid', 'Study Instance UID'],
  ['upstreamOrderId', 'Upstream order id'],
  ['orderId', 'Our order id (FHIR ServiceRequest/Task id)'],
  ['sender', 'Sender'],
  ['destination', 'Destination'],
];

export function orderListPage(
  ctx: PageContext,
  input: {
    filters: Record<string, string>;
    orders: Array<OrderRow & { waiting?: Waiting | null }>;
    nextCursor?: string;
    lateCommits?: number;
    moreLateCommits?: boolean;
    messages?: MessageRow[];
    /** Why the filters could not be applied (shown above the list). */
    problem?: string;
    states: readonly string[];
    sources: readonly string[];
  },
): string {
  const f = input.filters;
  const text = FILTER_FIELDS.map(([name, label]) => filterText('f', f, name, label)).join('');
  const rows = input.orders
    .map(
      (o) => `<tr>
        <td>${when(o.createdAt)}</td>
        <td class="mono"><a href="/audit/orders/${h(o.id)}">${h(o.accessionNumber ?? '(none)')}</a></td>
        <td class="mono">${h(o.patientId ?? '')}</td>
        <td class="mono">${h(o.placerOrderNumber ?? '')}</td>
        <td>${stateBadge(o.state)}${o.waiting ? `<div class="waits">${waitingText(o.waiting)}</div>` : ''}</td>
        <td>${h(o.source)}<div class="muted">${h(o.sender ?? '')}</div></td>
        <td class="mono">${h(o.upstreamOrderId ?? '')}</td>
        <td>${o.lastError ? `<span class="badge err" title="${h(o.lastError)}">error</span>` : ''}</td>
      </tr>`,
    )
    .join('');
  const next = olderPageLink('/audit/orders', f, input.nextCursor, 'Older orders →');
  const messages = input.messages?.length
    ? `<section class="card" aria-labelledby="msgs"><h2 id="msgs">Inbound messages with this MSH-10</h2>
        <table><thead><tr><th scope="col">Received</th><th scope="col">Type</th><th scope="col">Sender</th><th scope="col">Outcome</th><th scope="col">Answer</th></tr></thead><tbody>
        ${input.messages
          .map(
            (m) =>
              `<tr><td>${when(m.receivedAt)}</td><td class="mono"><a href="/audit/messages/${h(m.id)}">${h(m.messageType ?? m.transport)}</a></td><td>${h(m.sender ?? '')}</td><td>${outcomeBadge(m.outcome)}</td><td class="mono">${h(m.responseCode ?? '')}</td></tr>`,
          )
          .join('')}</tbody></table></section>`
    : '';
  return layout(
    { ...ctx, current: 'orders' },
    'Orders',
    `<h1>Orders</h1>
    ${input.problem ? `<div class="notice err" role="alert">${h(input.problem)}</div>` : ''}
    <section class="card" aria-labelledby="filters-h"><h2 id="filters-h" class="visually-hidden">Filters</h2>
      <form class="filters" method="get" action="/audit/orders" role="search">
        ${text}
        ${filterSelect('f', f, 'state', 'State', input.states)}
        ${filterSelect('f', f, 'source', 'Source', input.sources)}
        <label for="f-from">Created from (UTC)<input id="f-from" type="datetime-local" name="from" value="${h(instantFieldValue(f.from))}"></label>
        <label for="f-to">Created before (UTC)<input id="f-to" type="datetime-local" name="to" value="${h(instantFieldValue(f.to))}"></label>
        <label class="check" for="f-errors"><input id="f-errors" type="checkbox" name="errorsOnly" value="true"${f.errorsOnly === 'true' ? ' checked' : ''}> Errors only</label>
        <div class="actions"><button class="primary" type="submit">Search</button><a class="secondary" href="/audit/orders">Clear</a></div>
      </form>
    </section>
    ${messages}
    <section class="card" aria-labelledby="results-h">
      <h2 id="results-h">${input.orders.length ? `${input.orders.length}${input.nextCursor ? '+' : ''} order${input.orders.length === 1 ? '' : 's'}` : 'No orders match'}</h2>
      ${lateCommitsNote(input.lateCommits, 'order', input.moreLateCommits ? firstPageHref('/audit/orders', f) : undefined)}
      ${
        input.orders.length
          ? `<table><thead><tr><th scope="col">Created</th><th scope="col">Accession</th><th scope="col">Patient</th><th scope="col">Placer</th><th scope="col">State</th><th scope="col">Source</th><th scope="col">Upstream order</th><th scope="col"><span class="visually-hidden">Errors</span></th></tr></thead><tbody>${rows}</tbody></table>`
          : '<p class="muted">Try fewer filters, or another identifier. Identifiers match exactly, as the sender sent them: letter case and leading zeros count (<span class="mono">0004711</span> is not <span class="mono">4711</span>), and the patient identifier is the full value, not the masked one. Names and birth dates are not searchable: find the order by an identifier, a time range or the message browser.</p>'
      }
      <div class="pager"><span class="muted">Newest first</span>${next}</div>
    </section>`,
  );
}

/** "waits for the study since … · deadline …" */
function waitingText(w: Waiting): string {
  return `waits for ${h(w.for)}${w.since ? ` since ${when(w.since)}` : ''}${w.until ? ` · deadline ${when(w.until)}` : ''}`;
}

export function orderPage(
  ctx: PageContext,
  view: OrderDetailView,
  raws: Array<{ message: MessageRow; raw: RawView }>,
  /** The outbound destinations this replica has configured (empty: nothing is ever sent). */
  destinations: readonly string[] = [],
  documents: readonly OrderDocumentRow[] = [],
): string {
  const o = view.order;
  const facts: Array<[string, string | null]> = [
    ['Our order id', o.id],
    ['Accession', o.accessionNumber],
    ['Patient identifier', o.patientId],
    ['Placer / filler', [o.placerOrderNumber, o.fillerOrderNumber].filter(Boolean).join(' / ')],
    ['Study Instance UID', o.studyInstanceUid],
    ['Upstream order', o.upstreamOrderId],
    ['Upstream status', view.upstreamStatusText],
    ['Source / sender', `${o.source}${o.sender ? ` · ${o.sender}` : ''}`],
    ['Created', o.createdAt],
    ['Updated', o.updatedAt],
    ['Mapping version', view.mappingVersion],
    ['Last error', o.lastError],
  ];
  const waitingNotice = view.waiting
    ? `<div class="notice warn" role="status">This order ${waitingText(view.waiting)}.</div>`
    : '';
  const inbound = raws.length
    ? raws
        .map(
          ({ message, raw }) => `<div class="doc">
            <h3><a href="/audit/messages/${h(message.id)}">${h(message.messageType ?? message.transport)}</a> ${outcomeBadge(message.outcome)}
              <span class="muted mono">MSH-10 ${h(message.messageControlId ?? '–')}</span></h3>
            <div class="muted">${when(message.receivedAt)} · ${h(message.sender ?? '')} · ${h(message.bytes)} bytes · answer ${h(message.responseCode ?? '–')}</div>
            ${rawBlock(raw, `Inbound message ${message.messageControlId ?? ''}`)}
          </div>`,
        )
        .join('')
    : '<p class="muted">No inbound message.</p>';
  const lineage = view.lineage.length
    ? lineageTable(view.lineage)
    : '<p class="muted">No mapping recorded.</p>';
  const outbound = view.outbound.length
    ? `${view.outboundTotal > view.outbound.length ? `<p class="muted">The newest ${h(view.outbound.length)} of ${h(view.outboundTotal)} outbound documents, newest first.</p>` : ''}
      ${view.outbound.map((d) => outboundDoc(d, d.answers)).join('')}
      <div class="pager">${olderPageLink(`/audit/orders/${o.id}/outbound`, {}, view.outboundNextCursor, 'Older outbound documents →')}</div>`
    : destinations.length === 0
      ? '<p class="muted">Nothing sent: no outbound destination is configured (FHIR_SERVER_URL, RIS_MLLP_HOST/PORT, DICOMWEB_URL).</p>'
      : `<p class="muted">Nothing sent yet (destinations configured: ${h(destinations.join(', '))}).</p>`;
  return layout(
    { ...ctx, current: 'orders' },
    `Order ${o.accessionNumber ?? o.id}`,
    `<p><a href="/audit/orders">← Orders</a></p>
    <h1>Order ${h(o.accessionNumber ?? o.id)} ${stateBadge(o.state)}</h1>
    ${revealForm(ctx, `/audit/orders/${o.id}`, view.masked)}
    ${waitingNotice}
    <section class="card" aria-labelledby="facts-h"><h2 id="facts-h">Order</h2>
      <dl class="facts">${facts
        .filter(([, v]) => v)
        .map(([k, v]) => `<div><dt>${h(k)}</dt><dd>${h(v)}</dd></div>`)
        .join('')}</dl>
      ${jsonDetails(o.request, 'OrderRequest (as stored)')}
    </section>
    <div class="side">
      <section class="card" aria-labelledby="in-h"><h2 id="in-h">Inbound</h2>${inbound}</section>
      <section class="card" aria-labelledby="map-h"><h2 id="map-h">Mapped fields</h2>
        <p class="muted">${h(view.mappingVersion ?? '')} · target ← source, by rule</p>${lineage}</section>
      <section class="card" aria-labelledby="out-h"><h2 id="out-h">Outbound</h2>${outbound}</section>
    </div>
    ${reportsCard(o.id, documents)}
    <section class="card" aria-labelledby="tl-h"><h2 id="tl-h">Timeline</h2>${timelineOf(view)}
      ${view.waiting ? `<div class="notice warn waiting" role="status"><strong>Now:</strong> ${waitingText(view.waiting)}</div>` : ''}</section>`,
  );
}

/**
 * The timeline; a very long one is cut (repeated events in its middle left out) and says so
 * where the cut starts.
 */
function timelineOf(view: OrderDetailView): string {
  if (view.timelineOmitted === 0) return timelineList(view.timeline);
  const head = view.timeline.slice(0, TIMELINE_HEAD);
  const rest = view.timeline.slice(TIMELINE_HEAD);
  const n = view.timelineOmitted;
  return `${timelineList(head)}
    <div class="notice warn" role="status">${n} repeated event${n === 1 ? '' : 's'} (resent orders, polls, retries) after ${when(head[head.length - 1]?.occurredAt ?? '')} ${n === 1 ? 'is' : 'are'} not shown here: the first ${TIMELINE_HEAD} events, the newest ${TIMELINE_LIMIT - TIMELINE_HEAD} and every other event between them are. All of them: <span class="mono">GET /api/audit/events?orderId=${h(view.order.id)}</span>, newest first.</div>
    ${timelineList(rest)}`;
}

/** The upstream's reports for the order: viewable (masked JSON) and downloadable. */
function reportsCard(orderId: string, documents: readonly OrderDocumentRow[]): string {
  if (documents.length === 0) return '';
  return `<section class="card" aria-labelledby="docs-h"><h2 id="docs-h">Upstream reports</h2>
    <table><thead><tr><th scope="col">Report</th><th scope="col">Upstream status</th><th scope="col">Type</th><th scope="col">Size</th><th scope="col">Fetched</th><th scope="col"><span class="visually-hidden">Actions</span></th></tr></thead><tbody>${documents
      .map((d) => {
        const href = `/audit/orders/${orderId}/documents/${d.id}`;
        const json = d.contentType.includes('json');
        return `<tr><td>${h(REPORT_NAMES[d.kind] ?? d.kind)}</td><td class="mono">${h(d.upstreamStatus)}</td><td class="mono">${h(d.reportType)}</td><td>${h(d.bytes)} bytes</td><td>${when(d.fetchedAt)}</td>
          <td><a href="${h(href)}">View</a>${json ? ` · <a href="${h(href)}?download=1" download>Download (masked)</a>` : ''}</td></tr>`;
      })
      .join('')}</tbody></table></section>`;
}

const REPORT_NAMES: Readonly<Record<string, string>> = {
  results: 'Results',
  failure: 'Failure report',
  qc: 'QC report',
};

export function documentPage(
  ctx: PageContext,
  orderId: string,
  doc: OrderDocumentRow,
  masked: string | undefined,
): string {
  const href = `/audit/orders/${orderId}/documents/${doc.id}`;
  const title = `${REPORT_NAMES[doc.kind] ?? doc.kind} (${doc.reportType})`;
  const adminDownload =
    ctx.role === 'admin'
      ? `<form class="notice" method="post" action="${h(href)}">
          <input type="hidden" name="reveal" value="true">
          <input type="hidden" name="_csrf" value="${h(ctx.csrfToken ?? '')}">
          <div class="actions wrap"><span>The original file may hold PHI.</span>
            <label for="doc-reason" class="visually-hidden">Reason to download the original</label>
            <input id="doc-reason" type="text" name="reason" required minlength="3" maxlength="500" placeholder="Reason (recorded in the audit log)" class="reason">
            <button class="secondary" type="submit">Download original</button></div></form>`
      : `<div class="notice" role="status">${masked === undefined ? 'This report is a file that cannot be masked: an admin can download it with a reason.' : 'PHI is masked. An admin can download the original with a reason.'}</div>`;
  return layout(
    { ...ctx, current: 'orders' },
    title,
    `<p><a href="/audit/orders/${h(orderId)}">← Order</a></p>
    <h1>${h(title)} <span class="badge">${h(doc.upstreamStatus)}</span></h1>
    ${adminDownload}
    <section class="card"><dl class="facts">
      <div><dt>Kind</dt><dd>${h(doc.kind)}</dd></div><div><dt>Type</dt><dd>${h(doc.contentType)}</dd></div>
      <div><dt>Size</dt><dd>${h(doc.bytes)} bytes</dd></div><div><dt>Fetched</dt><dd>${h(doc.fetchedAt)}</dd></div></dl>
      ${masked !== undefined ? `<p><a class="secondary" href="${h(href)}?download=1" download>Download (masked JSON)</a></p><pre role="region" aria-label="${h(title)}" tabindex="0">${h(masked)}</pre>` : ''}
    </section>`,
  );
}

function peerAnswerBlock(a: PeerAnswerView | undefined, destination: string): string {
  if (!a) return '';
  const who = destination.startsWith('ris')
    ? "the RIS's ACK"
    : destination.startsWith('ehr')
      ? "the EHR's answer"
      : "the PACS's answer";
  return `<details class="sent answer"><summary>${h(who)}${a.status !== null ? ` (${h(a.status)})` : ''}${a.attempt !== null ? ` · attempt ${h(a.attempt)}` : ''}</summary>${a.view ? rawBlock(a.view, `${who} as received`) : '<p class="muted">No body.</p>'}</details>`;
}

/**
 * One order's outbound documents past the newest (the order page shows those), newest
 * first, a page at a time.
 */
export function orderOutboundPage(
  ctx: PageContext,
  order: { id: string },
  page: { items: OutboundItem[]; total: number; nextCursor?: string; problem?: string },
): string {
  return layout(
    { ...ctx, current: 'orders' },
    'Outbound documents',
    `<p><a href="/audit/orders/${h(order.id)}">← Order</a></p>
    <h1>Outbound documents of the order</h1>
    ${page.problem ? `<div class="notice err" role="alert">${h(page.problem)}</div>` : ''}
    <section class="card" aria-labelledby="out-h"><h2 id="out-h">${h(page.total)} outbound documents, newest first</h2>
      ${page.items.map((d) => outboundDoc(d, [])).join('')}
      <div class="pager">${olderPageLink(`/audit/orders/${order.id}/outbound`, {}, page.nextCursor, 'Older →')}</div>
    </section>`,
  );
}

/** One outbound document alone, each body up to the raw views' bound. */
export function outboundDocumentPage(ctx: PageContext, d: OutboundItem): string {
  return layout(
    { ...ctx, current: 'orders' },
    `Outbound document ${d.id}`,
    `${d.orderId ? `<p><a href="/audit/orders/${h(d.orderId)}">← Order</a></p>` : ''}
    <h1>Outbound document ${h(d.id)}</h1>
    <section class="card">${outboundDoc(d, [])}</section>`,
  );
}

function outboundDoc(
  d: OutboxRow & {
    document?: RawView;
    peerAnswer?: PeerAnswerView;
    bodiesCut?: true;
    fullPath?: string;
  },
  answers: EventRow[],
): string {
  const tone = d.status === 'delivered' ? 'ok' : d.status === 'dead' ? 'err' : 'info';
  return `<div class="doc">
    <h3>${h(d.kind)} → ${h(d.destination)} <span class="badge ${tone}">${h(d.status)}</span></h3>
    <div class="muted">${h(d.attempts)} attempt${d.attempts === 1 ? '' : 's'} · updated ${when(d.updatedAt)}</div>
    ${d.lastError ? `<div class="notice err">${h(d.lastError)}</div>` : ''}
    ${d.bodiesCut && d.fullPath ? `<div class="notice warn" role="status">Large: its bodies are cut here. <a href="/audit/outbound/${h(d.id)}">The whole document</a></div>` : ''}
    ${answers.length ? `<div>${answers.map((a) => `<div class="mono">${h(a.kind)}: ${h(a.summary)}</div>${jsonDetails(a.detail, 'answer')}`).join('')}</div>` : ''}
    ${d.document ? `<details class="sent"><summary>${d.document.format === 'hl7' ? 'as sent (HL7)' : d.document.format === 'json' ? 'as sent (JSON)' : 'as sent (tag dump)'}</summary>${rawBlock(d.document, `${d.kind} as sent`)}</details>` : ''}
    ${peerAnswerBlock(d.peerAnswer, d.destination)}
    ${jsonDetails(d.payload, 'outbox payload')}
  </div>`;
}
