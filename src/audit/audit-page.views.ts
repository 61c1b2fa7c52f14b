import type { Role } from '../config/app-config';
import type { MessageView, OrderDetailView, RawView } from './audit-presenter';
import type { EventRow, MessageRow, OrderRow, OutboxRow } from './audit-query.service';
import type { MappingTableView } from './mapping-tables.view';

/**
 * Server-rendered HTML of the audit page: no script, one inline stylesheet (CSP nonce), no
 * external request. Semantic markup (landmarks, headings, labelled controls, tables with
 * headers) so that it reads well with a screen reader and works with the keyboard alone.
 */

export interface PageContext {
  nonce: string;
  role?: Role;
  actor?: string;
  /** The session's CSRF token, for POST forms (absent for bearer callers). */
  csrfToken?: string;
  current?: 'orders' | 'dead-letters' | 'mappings';
}

/** HTML-escapes text for element content and quoted attribute values. */
export function h(value: unknown): string {
  return String(value ?? '')
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

const STYLE = `
:root{--bg:#f5f7fa;--card:#fff;--ink:#1c2430;--muted:#5b6778;--line:#dde3ea;--accent:#1f5fbf;--accent-ink:#fff;
--ok:#1b7f4b;--warn:#a86100;--err:#b42318;--mono:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace}
*{box-sizing:border-box}
html{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--ink);background:var(--bg)}
body{margin:0}
a{color:var(--accent)}
a:focus-visible,button:focus-visible,input:focus-visible,select:focus-visible,textarea:focus-visible,summary:focus-visible{outline:3px solid #7aa7ff;outline-offset:2px}
.skip{position:absolute;left:-999px;top:0;background:#fff;padding:.5rem 1rem;z-index:9}
.skip:focus{left:1rem}
header.top{background:#14213d;color:#fff;display:flex;align-items:center;gap:1.5rem;padding:0 1.5rem;height:52px}
header.top .brand{font-weight:600;letter-spacing:.2px;white-space:nowrap}
header.top .brand small{font-weight:400;opacity:.7;margin-left:.4rem}
header.top nav{display:flex;gap:.25rem;flex:1}
header.top nav a{color:#dfe7f5;text-decoration:none;padding:.4rem .75rem;border-radius:6px}
header.top nav a:hover{background:rgba(255,255,255,.08)}
header.top nav a[aria-current=page]{background:rgba(255,255,255,.16);color:#fff}
header.top .who{display:flex;align-items:center;gap:.75rem;font-size:.9rem;color:#cdd6e4}
header.top .who form{margin:0}
header.top .who button{background:transparent;color:#fff;border:1px solid rgba(255,255,255,.35);padding:.25rem .7rem;border-radius:6px;cursor:pointer}
main{max-width:1440px;margin:0 auto;padding:1.25rem 1.5rem 3rem}
h1{font-size:1.35rem;margin:.25rem 0 1rem}
h2{font-size:1.05rem;margin:0 0 .75rem}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:1rem 1.1rem;margin-bottom:1rem;box-shadow:0 1px 2px rgba(16,24,40,.04)}
.muted{color:var(--muted)}
.notice{border-left:4px solid var(--accent);background:#eef4ff;padding:.6rem .9rem;border-radius:6px;margin-bottom:1rem}
.notice.ok{border-color:var(--ok);background:#ecf8f1}
.notice.warn{border-color:var(--warn);background:#fff6e8}
.notice.err{border-color:var(--err);background:#fdeeee}
form.filters{display:grid;grid-template-columns:repeat(auto-fill,minmax(190px,1fr));gap:.7rem .9rem;align-items:end}
label{display:flex;flex-direction:column;gap:.25rem;font-size:.82rem;color:var(--muted);font-weight:500}
label.check{flex-direction:row;align-items:center;gap:.45rem;color:var(--ink);font-size:.9rem}
input[type=text],input[type=password],input[type=datetime-local],select,textarea{font:inherit;color:var(--ink);padding:.45rem .55rem;border:1px solid #c5cdd8;border-radius:6px;background:#fff;width:100%}
textarea{min-height:5rem}
.actions{display:flex;gap:.5rem;align-items:center}
button.primary,a.button{background:var(--accent);color:var(--accent-ink);border:0;border-radius:6px;padding:.5rem 1rem;font:inherit;font-weight:600;cursor:pointer;text-decoration:none;display:inline-block}
button.danger{background:var(--err);color:#fff;border:0;border-radius:6px;padding:.5rem 1rem;font:inherit;font-weight:600;cursor:pointer}
a.secondary,button.secondary{background:#fff;color:var(--ink);border:1px solid #c5cdd8;border-radius:6px;padding:.45rem .9rem;text-decoration:none;font:inherit;cursor:pointer}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.5rem .6rem;border-bottom:1px solid var(--line);vertical-align:top}
th{font-size:.78rem;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);font-weight:600;background:#fafbfc}
tbody tr:hover{background:#f7f9fc}
td.mono,span.mono,code{font-family:var(--mono);font-size:.86rem}
.badge{display:inline-block;padding:.08rem .5rem;border-radius:999px;font-size:.78rem;font-weight:600;background:#e8edf4;color:#2c3a4f;white-space:nowrap}
.badge.ok{background:#e3f4ea;color:var(--ok)}.badge.warn{background:#fff1db;color:var(--warn)}.badge.err{background:#fde4e2;color:var(--err)}.badge.info{background:#e6efff;color:#1f4f9f}
dl.facts{display:grid;grid-template-columns:repeat(auto-fill,minmax(220px,1fr));gap:.6rem 1.2rem;margin:0}
dl.facts div{min-width:0}
dl.facts dt{font-size:.75rem;text-transform:uppercase;letter-spacing:.04em;color:var(--muted)}
dl.facts dd{margin:0;font-family:var(--mono);font-size:.88rem;overflow-wrap:anywhere}
.pager{display:flex;justify-content:space-between;align-items:center;margin-top:.8rem}
ol.timeline{list-style:none;margin:0;padding:0}
ol.timeline li{display:grid;grid-template-columns:10.5rem 11rem 1fr;gap:.75rem;padding:.55rem 0;border-bottom:1px solid var(--line)}
ol.timeline li:last-child{border-bottom:0}
ol.timeline time{font-family:var(--mono);font-size:.8rem;color:var(--muted)}
ol.timeline .kind{font-family:var(--mono);font-size:.82rem}
ol.timeline details{margin-top:.25rem}
ol.timeline summary{cursor:pointer;color:var(--accent);font-size:.85rem}
pre{font-family:var(--mono);font-size:.8rem;background:#f6f8fb;border:1px solid var(--line);border-radius:6px;padding:.6rem .7rem;overflow:auto;max-height:28rem;margin:.4rem 0 0;white-space:pre-wrap;overflow-wrap:anywhere}
.side{display:grid;grid-template-columns:minmax(0,1.25fr) minmax(0,1.1fr) minmax(0,.85fr);gap:1rem;align-items:start}
@media (max-width:1100px){.side{grid-template-columns:1fr}ol.timeline li{grid-template-columns:1fr}}
.hl7{font-family:var(--mono);font-size:.8rem;background:#f6f8fb;border:1px solid var(--line);border-radius:6px;padding:.5rem .6rem;overflow:auto;max-height:32rem}
.hl7 .seg{white-space:pre-wrap;overflow-wrap:anywhere;padding:.1rem 0}
.hl7 .sid{font-weight:700;color:#14213d}
.hl7 .sep{color:#98a2b3}
.hl7 .f{position:relative;border-radius:3px;cursor:help}
.hl7 .f:hover{background:#fff3c4;outline:1px solid #e7c65a}
.hl7 .f:hover::after{content:attr(data-pos);position:absolute;left:0;top:1.35em;z-index:5;background:#14213d;color:#fff;font:600 .72rem/1.2 system-ui,sans-serif;padding:.25rem .45rem;border-radius:4px;white-space:nowrap;pointer-events:none}
table.lineage{table-layout:fixed}
table.lineage td{font-size:.84rem}
table.lineage td.mono,table.lineage td.v{overflow-wrap:anywhere}
table.lineage td.src{overflow-wrap:break-word;word-break:normal}
table.lineage col.c-target{width:31%}table.lineage col.c-source{width:36%}table.lineage col.c-value{width:33%}
table.lineage .rule{font-size:.74rem;color:var(--muted);font-family:var(--mono)}
table.lineage td.v{font-family:var(--mono);overflow-wrap:anywhere}
.doc{border:1px solid var(--line);border-radius:8px;padding:.6rem .7rem;margin-bottom:.7rem}
.doc details.sent summary{cursor:pointer;color:var(--accent);font-size:.85rem}
.doc h3{font-size:.92rem;margin:0 0 .35rem;display:flex;gap:.5rem;align-items:center;flex-wrap:wrap}
.signin{max-width:420px;margin:10vh auto}
.signin h1{margin-top:0}
.signin form{display:flex;flex-direction:column;gap:.9rem}
.grid2{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:1rem}
@media (max-width:900px){.grid2{grid-template-columns:1fr}}
.actions.wrap{flex-wrap:wrap}
input.reason{max-width:28rem}
form.stack{display:flex;flex-direction:column;gap:.9rem;max-width:40rem}
.visually-hidden{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}
`;

function layout(ctx: PageContext, title: string, body: string): string {
  const nav = ctx.role
    ? `<nav aria-label="Audit log">
        ${navLink('/audit', 'Orders', ctx.current === 'orders')}
        ${navLink('/audit/dead-letters', 'Dead letters', ctx.current === 'dead-letters')}
        ${navLink('/audit/mappings', 'Mapping tables', ctx.current === 'mappings')}
      </nav>
      <div class="who"><span>${h(ctx.role)} <span class="muted">(${h(ctx.actor ?? '')})</span></span>
        ${
          ctx.csrfToken
            ? `<form method="post" action="/audit/session/sign-out"><input type="hidden" name="_csrf" value="${h(ctx.csrfToken)}"><button type="submit">Sign out</button></form>`
            : ''
        }
      </div>`
    : '<nav></nav>';
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${h(title)} · Audit log</title><style nonce="${h(ctx.nonce)}">${STYLE}</style></head>
<body><a class="skip" href="#content">Skip to content</a>
<header class="top"><div class="brand">Audit log<small>imaging-ai-adapter</small></div>${nav}</header>
<main id="content" tabindex="-1">${body}</main></body></html>`;
}

function navLink(href: string, text: string, current: boolean): string {
  return `<a href="${href}"${current ? ' aria-current="page"' : ''}>${h(text)}</a>`;
}

export function signInPage(
  ctx: PageContext,
  options: { next?: string; error?: string } = {},
): string {
  return layout(
    ctx,
    'Sign in',
    `<div class="card signin">
      <h1>Sign in to the audit log</h1>
      <p class="muted">Use your analyst or admin API token. The session lasts one working shift (8 hours) or until you sign out.</p>
      ${options.error ? `<div class="notice err" role="alert">${h(options.error)}</div>` : ''}
      <form method="post" action="/audit/session">
        <input type="hidden" name="next" value="${h(options.next ?? '/audit')}">
        <label for="token">API token<input id="token" name="token" type="password" autocomplete="current-password" required autofocus></label>
        <button class="primary" type="submit">Sign in</button>
      </form>
    </div>`,
  );
}

export function errorPage(ctx: PageContext, status: number, title: string, detail: string): string {
  return layout(
    ctx,
    title,
    `<div class="card"><h1>${h(status)} · ${h(title)}</h1><p>${h(detail)}</p><p><a href="/audit">Back to the order list</a></p></div>`,
  );
}

function stateBadge(state: string): string {
  const tone =
    state === 'delivered'
      ? 'ok'
      : state === 'failed'
        ? 'err'
        : state === 'qc-hold' || state === 'cancelled'
          ? 'warn'
          : 'info';
  return `<span class="badge ${tone}">${h(state)}</span>`;
}

function severityBadge(severity: string): string {
  const tone = severity === 'error' ? 'err' : severity === 'warning' ? 'warn' : 'info';
  return `<span class="badge ${tone}">${h(severity)}</span>`;
}

function when(iso: string | null | undefined): string {
  if (!iso) return '';
  return `<time datetime="${h(iso)}">${h(iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z'))}</time>`;
}

const FILTER_FIELDS: Array<[string, string]> = [
  ['accession', 'Accession number'],
  ['patientId', 'Patient identifier'],
  ['placer', 'Placer order number'],
  ['filler', 'Filler order number'],
  ['msh10', 'MSH-10 control id'],
  ['studyInstanceUid', 'Study Instance UID'],
  ['upstreamOrderId', 'Upstream order id'],
  ['orderId', 'Our order id'],
  ['sender', 'Sender'],
  ['destination', 'Destination'],
];

export function orderListPage(
  ctx: PageContext,
  input: {
    filters: Record<string, string>;
    orders: OrderRow[];
    nextCursor?: string;
    messages?: MessageRow[];
    /** Why the filters could not be applied (shown above the list). */
    problem?: string;
    states: readonly string[];
    sources: readonly string[];
  },
): string {
  const f = input.filters;
  const text = FILTER_FIELDS.map(
    ([name, label]) =>
      `<label for="f-${name}">${h(label)}<input id="f-${name}" type="text" name="${name}" value="${h(f[name] ?? '')}" autocomplete="off" spellcheck="false"></label>`,
  ).join('');
  const select = (name: string, label: string, values: readonly string[]) =>
    `<label for="f-${name}">${h(label)}<select id="f-${name}" name="${name}"><option value="">any</option>${values
      .map((v) => `<option${f[name] === v ? ' selected' : ''}>${h(v)}</option>`)
      .join('')}</select></label>`;
  const rows = input.orders
    .map(
      (o) => `<tr>
        <td>${when(o.createdAt)}</td>
        <td class="mono"><a href="/audit/orders/${h(o.id)}">${h(o.accessionNumber ?? '(none)')}</a></td>
        <td class="mono">${h(o.patientId ?? '')}</td>
        <td class="mono">${h(o.placerOrderNumber ?? '')}</td>
        <td>${stateBadge(o.state)}</td>
        <td>${h(o.source)}<div class="muted">${h(o.sender ?? '')}</div></td>
        <td class="mono">${h(o.upstreamOrderId ?? '')}</td>
        <td>${o.lastError ? `<span class="badge err" title="${h(o.lastError)}">error</span>` : ''}</td>
      </tr>`,
    )
    .join('');
  const query = new URLSearchParams(
    Object.entries(f).filter(([k, v]) => v !== '' && k !== 'cursor'),
  );
  const next = input.nextCursor
    ? `<a class="secondary" href="/audit?${h(new URLSearchParams([...query, ['cursor', input.nextCursor]]).toString())}">Older orders →</a>`
    : '';
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
      <form class="filters" method="get" action="/audit" role="search">
        ${text}
        ${select('state', 'State', input.states)}
        ${select('source', 'Source', input.sources)}
        <label for="f-from">Created from (UTC)<input id="f-from" type="datetime-local" name="from" value="${h(f.from ?? '')}"></label>
        <label for="f-to">Created before (UTC)<input id="f-to" type="datetime-local" name="to" value="${h(f.to ?? '')}"></label>
        <label class="check" for="f-errors"><input id="f-errors" type="checkbox" name="errorsOnly" value="true"${f.errorsOnly === 'true' ? ' checked' : ''}> Errors only</label>
        <div class="actions"><button class="primary" type="submit">Search</button><a class="secondary" href="/audit">Clear</a></div>
      </form>
    </section>
    ${messages}
    <section class="card" aria-labelledby="results-h">
      <h2 id="results-h">${input.orders.length ? `${input.orders.length}${input.nextCursor ? '+' : ''} order${input.orders.length === 1 ? '' : 's'}` : 'No orders match'}</h2>
      ${
        input.orders.length
          ? `<table><thead><tr><th scope="col">Created</th><th scope="col">Accession</th><th scope="col">Patient</th><th scope="col">Placer</th><th scope="col">State</th><th scope="col">Source</th><th scope="col">Upstream order</th><th scope="col"><span class="visually-hidden">Errors</span></th></tr></thead><tbody>${rows}</tbody></table>`
          : '<p class="muted">Try fewer filters, or another identifier.</p>'
      }
      <div class="pager"><span class="muted">Newest first</span>${next}</div>
    </section>`,
  );
}

function outcomeBadge(outcome: string): string {
  const tone = outcome === 'accepted' ? 'ok' : outcome === 'duplicate' ? 'info' : 'err';
  return `<span class="badge ${tone}">${h(outcome)}</span>`;
}

export function rawBlock(view: RawView, label: string): string {
  if (view.format === 'hl7') {
    const sep = `<span class="sep">${h(view.separator)}</span>`;
    const lines = view.segments
      .map((s) => {
        const fields = s.fields
          .map((f) => {
            if (f.position === 'MSH-1') return sep;
            const tip = f.name ? `${f.position} · ${f.name}` : f.position;
            const lead = f.position === 'MSH-2' ? '' : sep;
            return `${lead}<span class="f" data-pos="${h(tip)}" title="${h(tip)}">${h(f.value)}</span>`;
          })
          .join('');
        return `<div class="seg"><span class="sid">${h(s.id)}</span>${fields}</div>`;
      })
      .join('');
    return `<div class="hl7" role="region" aria-label="${h(label)}" tabindex="0">${lines}</div>`;
  }
  return `<pre role="region" aria-label="${h(label)}" tabindex="0">${h(view.text)}</pre>`;
}

function jsonDetails(value: unknown, summary = 'details'): string {
  if (!value || (typeof value === 'object' && Object.keys(value).length === 0)) return '';
  return `<details><summary>${h(summary)}</summary><pre>${h(JSON.stringify(value, null, 2))}</pre></details>`;
}

function timelineList(events: EventRow[]): string {
  if (events.length === 0) return '<p class="muted">No events.</p>';
  return `<ol class="timeline">${events
    .map(
      (e) => `<li id="event-${h(e.id)}">
        <div>${when(e.occurredAt)}</div>
        <div><span class="kind">${h(e.kind)}</span><div>${e.severity === 'info' ? '' : severityBadge(e.severity)}</div></div>
        <div>${h(e.summary)}${e.actor ? ` <span class="muted">· ${h(e.actor)}</span>` : ''}
          ${jsonDetails(e.detail)}</div>
      </li>`,
    )
    .join('')}</ol>`;
}

function revealForm(ctx: PageContext, action: string, masked: boolean): string {
  if (!masked) {
    return `<div class="notice warn" role="status">Unmasked PHI is shown. This view was recorded in the audit log. <a href="${h(action)}">Mask again</a></div>`;
  }
  if (ctx.role !== 'admin') {
    return `<div class="notice" role="status">Names, birth dates and patient identifiers are partly hidden.</div>`;
  }
  return `<form class="notice" method="get" action="${h(action)}">
      <input type="hidden" name="reveal" value="true">
      <div class="actions wrap">
        <span>PHI is masked.</span>
        <label for="reveal-reason" class="visually-hidden">Reason to reveal</label>
        <input id="reveal-reason" type="text" name="reason" required minlength="3" maxlength="500" placeholder="Reason (recorded in the audit log)" class="reason">
        <button class="secondary" type="submit">Reveal PHI</button>
      </div>
    </form>`;
}

export function orderPage(
  ctx: PageContext,
  view: OrderDetailView,
  raws: Array<{ message: MessageRow; raw: RawView }>,
  /** The outbound destinations this replica has configured (empty: nothing is ever sent). */
  destinations: readonly string[] = [],
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
    ? `<table class="lineage"><caption class="visually-hidden">Field lineage: target, source location, value, rule</caption>
        <colgroup><col class="c-target"><col class="c-source"><col class="c-value"></colgroup>
        <thead><tr><th scope="col">Target · rule</th><th scope="col">Source</th><th scope="col">Value</th></tr></thead><tbody>${view.lineage
          .map(
            (l) =>
              `<tr><td><span class="mono">${pathBreaks(l.target)}</span><div class="rule">${h(l.ruleId)}</div></td><td class="mono src">${pathBreaks(l.source)}</td><td class="v">${h(l.value)}${l.rule ? `<div class="rule">${h(l.rule)}</div>` : ''}</td></tr>`,
          )
          .join('')}</tbody></table>`
    : '<p class="muted">No mapping recorded.</p>';
  const outbound = view.outbound.length
    ? view.outbound.map((d) => outboundDoc(d, d.answers)).join('')
    : destinations.length === 0
      ? '<p class="muted">Nothing sent: no outbound destination is configured (FHIR_SERVER_URL, RIS_MLLP_HOST/PORT, DICOMWEB_URL).</p>'
      : `<p class="muted">Nothing sent yet (destinations configured: ${h(destinations.join(', '))}).</p>`;
  return layout(
    { ...ctx, current: 'orders' },
    `Order ${o.accessionNumber ?? o.id}`,
    `<p><a href="/audit">← Orders</a></p>
    <h1>Order ${h(o.accessionNumber ?? o.id)} ${stateBadge(o.state)}</h1>
    ${revealForm(ctx, `/audit/orders/${o.id}`, view.masked)}
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
    <section class="card" aria-labelledby="tl-h"><h2 id="tl-h">Timeline</h2>${timelineList(view.timeline)}</section>`,
  );
}

/** A source path with break opportunities after dots, brackets and spaces (never mid-name). */
function pathBreaks(path: string): string {
  return h(path).replace(/([./\]\s])/g, '$1<wbr>');
}

function outboundDoc(d: OutboxRow & { document?: RawView }, answers: EventRow[]): string {
  const tone = d.status === 'delivered' ? 'ok' : d.status === 'dead' ? 'err' : 'info';
  return `<div class="doc">
    <h3>${h(d.kind)} → ${h(d.destination)} <span class="badge ${tone}">${h(d.status)}</span></h3>
    <div class="muted">${h(d.attempts)} attempt${d.attempts === 1 ? '' : 's'} · updated ${when(d.updatedAt)}</div>
    ${d.lastError ? `<div class="notice err">${h(d.lastError)}</div>` : ''}
    ${answers.length ? `<div>${answers.map((a) => `<div class="mono">${h(a.kind)}: ${h(a.summary)}</div>${jsonDetails(a.detail, 'answer')}`).join('')}</div>` : ''}
    ${d.document ? `<details class="sent"><summary>${d.document.format === 'hl7' ? 'as sent (HL7)' : 'as sent'}</summary>${rawBlock(d.document, `${d.kind} as sent`)}</details>` : ''}
    ${jsonDetails(d.payload, 'outbox payload')}
  </div>`;
}

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
    { ...ctx, current: 'orders' },
    `Message ${view.messageControlId ?? view.id}`,
    `<p><a href="/audit">← Orders</a></p>
    <h1>Inbound message ${h(view.messageControlId ?? view.id)} ${outcomeBadge(view.outcome)}</h1>
    ${revealForm(ctx, `/audit/messages/${view.id}`, view.masked)}
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

export function deadLettersPage(
  ctx: PageContext,
  input: { items: OutboxRow[]; nextCursor?: string; replayed?: string },
): string {
  const rows = input.items
    .map(
      (d) => `<tr>
        <td class="mono">${h(d.id)}</td>
        <td>${d.orderId ? `<a class="mono" href="/audit/orders/${h(d.orderId)}">${h(d.orderId.slice(0, 8))}…</a>` : ''}</td>
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
    ${input.replayed ? `<div class="notice ok" role="status">Outbound document ${h(input.replayed)} is queued again; the replay is recorded in the audit log.</div>` : ''}
    <section class="card">
      ${
        input.items.length
          ? `<table><thead><tr><th scope="col">Id</th><th scope="col">Order</th><th scope="col">Document</th><th scope="col">Destination</th><th scope="col">Attempts</th><th scope="col">Last error</th><th scope="col">Gave up</th><th scope="col"><span class="visually-hidden">Action</span></th></tr></thead><tbody>${rows}</tbody></table>`
          : '<p class="muted">No dead letters. Everything was delivered or is still being retried.</p>'
      }
      <div class="pager"><span class="muted">Most recent first</span>${input.nextCursor ? `<a class="secondary" href="/audit/dead-letters?cursor=${h(encodeURIComponent(input.nextCursor))}">Older →</a>` : ''}</div>
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

export function mappingsPage(ctx: PageContext, tables: MappingTableView[]): string {
  const toc = tables.map((t) => `<li><a href="#${h(t.id)}">${h(t.title)}</a></li>`).join('');
  const body = tables
    .map(
      (t) => `<section class="card" id="${h(t.id)}" aria-labelledby="${h(t.id)}-h">
        <h2 id="${h(t.id)}-h">${h(t.title)} ${t.version ? `<span class="badge">${h(t.version)}</span>` : ''}</h2>
        ${t.note ? `<p class="muted">${h(t.note)}</p>` : ''}
        <table><thead><tr>${t.columns.map((c) => `<th scope="col">${h(c)}</th>`).join('')}</tr></thead>
        <tbody>${t.rows.map((r) => `<tr>${r.map((c) => `<td class="mono">${h(c)}</td>`).join('')}</tr>`).join('')}</tbody></table>
      </section>`,
    )
    .join('');
  return layout(
    { ...ctx, current: 'mappings' },
    'Mapping tables',
    `<h1>Active mapping tables</h1><section class="card"><ul>${toc}</ul></section>${body}`,
  );
}
