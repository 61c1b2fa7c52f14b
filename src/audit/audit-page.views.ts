import type { DryRunResult } from './audit-api.dry-run';
import type { Role } from '../config/app-config';
import type { MessageView, OrderDetailView, RawView, Waiting } from './audit-presenter';
import type { EventRow, MessageRow, OrderRow, OutboxRow } from './audit-query.service';
import type { OrderDocumentRow } from '../persistence/audit-query.repository';
import type { PeerAnswerView } from './audit-presenter';
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
  current?: 'dashboard' | 'orders' | 'messages' | 'dead-letters' | 'mappings' | 'dry-run';
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
textarea.paste{min-height:14rem;font-family:var(--mono);font-size:.84rem}
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
.grid3{display:grid;grid-template-columns:repeat(3,minmax(0,1fr));gap:1rem}
@media (max-width:1100px){.grid3{grid-template-columns:1fr}}
.tiles{display:grid;grid-template-columns:repeat(5,minmax(0,1fr));gap:1rem;margin-bottom:1rem}
@media (max-width:1100px){.tiles{grid-template-columns:repeat(2,minmax(0,1fr))}}
.tile{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:.8rem 1rem}
.tile.bad{border-color:#f3b8b2;background:#fff8f7}
.tile-h{font-size:.78rem;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);font-weight:600;display:flex;gap:.4rem;align-items:center}
.tile-n{font-size:1.7rem;font-weight:650;margin:.2rem 0}
.tile-n small{font-size:.8rem;font-weight:400;color:var(--muted)}
a.num{font-variant-numeric:tabular-nums;text-decoration:none;font-weight:650}
a.num:hover{text-decoration:underline}
a.num.zero{color:var(--muted);font-weight:400}
table.counts td{font-variant-numeric:tabular-nums}
table.counts th[scope=row]{text-transform:none;font-size:.88rem;color:var(--ink);font-family:var(--mono);background:none}
ol.bars{list-style:none;margin:0;padding:0;display:flex;align-items:flex-end;gap:2px;height:96px;border-bottom:1px solid var(--line)}
ol.bars li{flex:1;display:flex;align-items:flex-end;height:100%}
ol.bars a.bar{display:block;width:100%;background:#9db8e8;border-radius:2px 2px 0 0;min-height:1px}
ol.bars a.bar.bad{background:#e99a92}
ol.bars a.bar:hover{background:var(--accent)}
.bar.h0{height:1px;background:#e3e8ef}.bar.h1{height:10%}.bar.h2{height:20%}.bar.h3{height:30%}.bar.h4{height:40%}.bar.h5{height:50%}.bar.h6{height:60%}.bar.h7{height:70%}.bar.h8{height:80%}.bar.h9{height:90%}.bar.h10{height:100%}
.bars-axis{display:flex;justify-content:space-between;font-size:.75rem;margin-top:.25rem}
.waits{font-size:.78rem;color:var(--warn);margin-top:.2rem}
.visually-hidden{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}
`;

function layout(ctx: PageContext, title: string, body: string): string {
  const nav = ctx.role
    ? `<nav aria-label="Audit log">
        ${navLink('/audit', 'Dashboard', ctx.current === 'dashboard')}
        ${navLink('/audit/orders', 'Orders', ctx.current === 'orders')}
        ${navLink('/audit/messages', 'Messages', ctx.current === 'messages')}
        ${navLink('/audit/dead-letters', 'Dead letters', ctx.current === 'dead-letters')}
        ${navLink('/audit/mappings', 'Mapping tables', ctx.current === 'mappings')}
        ${navLink('/audit/dry-run', 'Dry run', ctx.current === 'dry-run')}
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
    orders: Array<OrderRow & { waiting?: Waiting | null }>;
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
        <td>${stateBadge(o.state)}${o.waiting ? `<div class="waits">${waitingText(o.waiting)}</div>` : ''}</td>
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
    ? `<a class="secondary" href="/audit/orders?${h(new URLSearchParams([...query, ['cursor', input.nextCursor]]).toString())}">Older orders →</a>`
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
      <form class="filters" method="get" action="/audit/orders" role="search">
        ${text}
        ${select('state', 'State', input.states)}
        ${select('source', 'Source', input.sources)}
        <label for="f-from">Created from (UTC)<input id="f-from" type="datetime-local" name="from" value="${h(f.from ?? '')}"></label>
        <label for="f-to">Created before (UTC)<input id="f-to" type="datetime-local" name="to" value="${h(f.to ?? '')}"></label>
        <label class="check" for="f-errors"><input id="f-errors" type="checkbox" name="errorsOnly" value="true"${f.errorsOnly === 'true' ? ' checked' : ''}> Errors only</label>
        <div class="actions"><button class="primary" type="submit">Search</button><a class="secondary" href="/audit/orders">Clear</a></div>
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

/** "waits for the study since … · deadline …" */
function waitingText(w: Waiting): string {
  return `waits for ${h(w.for)}${w.since ? ` since ${when(w.since)}` : ''}${w.until ? ` · deadline ${when(w.until)}` : ''}`;
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
  return `<form class="notice" method="post" action="${h(action)}">
      <input type="hidden" name="reveal" value="true">
      <input type="hidden" name="_csrf" value="${h(ctx.csrfToken ?? '')}">
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
    ? view.outbound.map((d) => outboundDoc(d, d.answers)).join('')
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
    <section class="card" aria-labelledby="tl-h"><h2 id="tl-h">Timeline</h2>${timelineList(view.timeline)}
      ${view.waiting ? `<div class="notice warn waiting" role="status"><strong>Now:</strong> ${waitingText(view.waiting)}</div>` : ''}</section>`,
  );
}

/** A source path with break opportunities after dots, brackets and spaces (never mid-name). */
function pathBreaks(path: string): string {
  return h(path).replace(/([./\]\s])/g, '$1<wbr>');
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

function outboundDoc(
  d: OutboxRow & { document?: RawView; peerAnswer?: PeerAnswerView },
  answers: EventRow[],
): string {
  const tone = d.status === 'delivered' ? 'ok' : d.status === 'dead' ? 'err' : 'info';
  return `<div class="doc">
    <h3>${h(d.kind)} → ${h(d.destination)} <span class="badge ${tone}">${h(d.status)}</span></h3>
    <div class="muted">${h(d.attempts)} attempt${d.attempts === 1 ? '' : 's'} · updated ${when(d.updatedAt)}</div>
    ${d.lastError ? `<div class="notice err">${h(d.lastError)}</div>` : ''}
    ${answers.length ? `<div>${answers.map((a) => `<div class="mono">${h(a.kind)}: ${h(a.summary)}</div>${jsonDetails(a.detail, 'answer')}`).join('')}</div>` : ''}
    ${d.document ? `<details class="sent"><summary>${d.document.format === 'hl7' ? 'as sent (HL7)' : d.document.format === 'json' ? 'as sent (JSON)' : 'as sent (tag dump)'}</summary>${rawBlock(d.document, `${d.kind} as sent`)}</details>` : ''}
    ${peerAnswerBlock(d.peerAnswer, d.destination)}
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

export function deadLettersPage(
  ctx: PageContext,
  input: { items: OutboxRow[]; nextCursor?: string; replayed?: string },
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
    ${input.replayed ? `<div class="notice ok" role="status">Outbound document ${h(input.replayed)} is queued again; the replay is recorded in the audit log.</div>` : ''}
    <section class="card">
      ${
        input.items.length
          ? `<table><thead><tr><th scope="col">Accession</th><th scope="col">Placer</th><th scope="col">Document</th><th scope="col">Destination</th><th scope="col">Attempts</th><th scope="col">Last error</th><th scope="col">Gave up</th><th scope="col"><span class="visually-hidden">Action</span></th></tr></thead><tbody>${rows}</tbody></table>`
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

/** What the dashboard shows of the upstream (the /health snapshot and the client's limits). */
export interface DashboardUpstream {
  status: string;
  deprecation?: string;
  migrationGuide?: string;
  detail?: string;
  checkedAt?: string;
  limits: { perEndpointPerMinute: number; totalPerMinute: number };
}

/** `2026-11-25T02:07`: a datetime-local value (UTC), as the order list's filters take it. */
function minuteParam(iso: string, minusMs: number): string {
  return new Date(Date.parse(iso) - minusMs).toISOString().slice(0, 16);
}

function countLink(href: string, value: number, label: string): string {
  return `<a class="num${value === 0 ? ' zero' : ''}" href="${h(href)}" aria-label="${h(`${value} ${label}`)}">${h(value)}</a>`;
}

/** 60 one-minute bars, no script and no inline style (heights are classes h0…h10). */
function minuteBars(
  label: string,
  now: string,
  minutes: Array<{ minute: string; count: number; bad: number }>,
  href: (minute: string) => string,
): string {
  const byMinute = new Map(minutes.map((m) => [m.minute.slice(0, 16), m]));
  const end = Math.floor(Date.parse(now) / 60_000) * 60_000;
  const slots = Array.from({ length: 60 }, (_, i) => new Date(end - (59 - i) * 60_000));
  const max = Math.max(1, ...minutes.map((m) => m.count));
  const peak = Math.max(0, ...minutes.map((m) => m.count));
  return `<div class="bars-wrap"><ol class="bars" aria-label="${h(label)}, last 60 minutes (UTC)">${slots
    .map((d) => {
      const key = d.toISOString().slice(0, 16);
      const m = byMinute.get(key);
      const count = m?.count ?? 0;
      const tone = m && m.bad > 0 ? ' bad' : '';
      const text = `${key.slice(11)}Z: ${count}${m?.bad ? ` (${m.bad} refused)` : ''}`;
      return `<li><a class="bar h${Math.ceil((count / max) * 10)}${tone}" href="${h(href(key))}" title="${h(text)}"><span class="visually-hidden">${h(text)}</span></a></li>`;
    })
    .join(
      '',
    )}</ol><div class="bars-axis muted"><span>−60 min</span><span>peak ${h(peak)}/min</span><span>now</span></div></div>`;
}

export function dashboardPage(
  ctx: PageContext,
  d: import('./audit-query.service').DashboardData,
  upstream: DashboardUpstream,
): string {
  const HOUR = 3_600_000;
  const DAY = 24 * HOUR;
  const fromHour = minuteParam(d.now, HOUR);
  const fromDay = minuteParam(d.now, DAY);
  const orders = (params: Record<string, string>) =>
    `/audit/orders?${new URLSearchParams(params).toString()}`;
  const countTable = (
    title: string,
    id: string,
    rows: Array<{ key: string; hour: number; day: number }>,
    link: (key: string, from: string) => string,
    empty: string,
  ) => `<section class="card" aria-labelledby="${id}"><h2 id="${id}">${h(title)}</h2>
      ${
        rows.length
          ? `<table class="counts"><thead><tr><th scope="col"></th><th scope="col">Last hour</th><th scope="col">Last day</th></tr></thead><tbody>${rows
              .map(
                (r) =>
                  `<tr><th scope="row">${h(r.key)}</th><td>${countLink(link(r.key, fromHour), r.hour, `${r.key}, last hour`)}</td><td>${countLink(link(r.key, fromDay), r.day, `${r.key}, last day`)}</td></tr>`,
              )
              .join('')}</tbody></table>`
          : `<p class="muted">${h(empty)}</p>`
      }</section>`;
  const u = d.upstreamCalls;
  const headroom = Math.max(0, upstream.limits.totalPerMinute - u.lastMinute);
  const endpointHeadroom = u.busiestEndpoint
    ? Math.max(0, upstream.limits.perEndpointPerMinute - u.busiestEndpoint.calls)
    : upstream.limits.perEndpointPerMinute;
  const upTone =
    upstream.status === 'up'
      ? 'ok'
      : upstream.status === 'retired' || upstream.status === 'down'
        ? 'err'
        : 'warn';
  const tiles = `<div class="tiles">
      <div class="tile"><div class="tile-h">Messages in</div>
        <div class="tile-n">${countLink(`/audit/messages?from=${fromHour}`, d.messagesIn.hour, 'messages in, last hour')}<small> last hour</small></div>
        <div>${countLink(`/audit/messages?from=${fromDay}`, d.messagesIn.day, 'messages in, last day')} last day ·
          refused ${countLink(`/audit/messages?outcome=refused&from=${fromDay}`, d.messagesIn.refusedDay, 'refused messages, last day')}</div></div>
      <div class="tile"><div class="tile-h">Results out</div>
        <div class="tile-n">${countLink(orders({ state: 'delivered', from: fromHour }), d.resultsOut.hour, 'documents delivered, last hour')}<small> last hour</small></div>
        <div>${countLink(orders({ state: 'delivered', from: fromDay }), d.resultsOut.day, 'documents delivered, last day')} last day</div></div>
      <div class="tile${d.errors.hour ? ' bad' : ''}"><div class="tile-h">Errors</div>
        <div class="tile-n">${countLink(orders({ errorsOnly: 'true', from: fromHour }), d.errors.hour, 'error events, last hour')}<small> last hour</small></div>
        <div>${countLink(orders({ errorsOnly: 'true', from: fromDay }), d.errors.day, 'error events, last day')} last day</div></div>
      <div class="tile${d.deadLetters.total ? ' bad' : ''}"><div class="tile-h">Dead letters</div>
        <div class="tile-n">${countLink('/audit/dead-letters', d.deadLetters.total, 'dead letters waiting for a replay')}<small> waiting</small></div>
        <div>${h(d.deadLetters.day)} given up in the last day</div></div>
      <div class="tile"><div class="tile-h">Upstream <span class="badge ${upTone}">${h(upstream.status)}</span></div>
        <div class="tile-n"><span class="num">${h(headroom)}</span><small> of ${h(upstream.limits.totalPerMinute)} calls/min free</small></div>
        <div>${h(u.lastMinute)} calls in the last 60 s${u.busiestEndpoint ? ` · busiest ${h(u.busiestEndpoint.endpoint)}: ${h(u.busiestEndpoint.calls)} (${h(endpointHeadroom)} of ${h(upstream.limits.perEndpointPerMinute)} free)` : ''}</div>
        <div>${h(u.rateLimitedHour)} answered 429 · ${h(u.failedHour)} failed, last hour</div></div>
    </div>
    ${upstream.status === 'retired' ? `<div class="notice err" role="alert"><strong>The upstream API version is retired:</strong> calls have stopped. ${h(upstream.detail ?? '')} ${upstream.migrationGuide ? `Migration guide: <span class="mono">${h(upstream.migrationGuide)}</span>` : ''}</div>` : ''}
    ${upstream.deprecation ? `<div class="notice warn" role="status"><strong>Deprecation announced by the upstream:</strong> ${h(upstream.deprecation)}</div>` : ''}
    ${upstream.status !== 'retired' && upstream.detail ? `<div class="notice" role="status">Upstream: ${h(upstream.detail)}</div>` : ''}`;
  const waiting = d.oldestWaiting.length
    ? `<table><thead><tr><th scope="col">State</th><th scope="col">Oldest order</th><th scope="col">Waiting since</th></tr></thead><tbody>${d.oldestWaiting
        .map(
          (w) =>
            `<tr><th scope="row"><a href="${h(orders({ state: w.state }))}">${stateBadge(w.state)}</a></th><td class="mono"><a href="/audit/orders/${h(w.orderId)}">${h(w.accessionNumber ?? w.orderId)}</a></td><td>${when(w.createdAt)} <span class="muted">(${h(ago(d.now, w.createdAt))})</span></td></tr>`,
        )
        .join('')}</tbody></table>`
    : '<p class="muted">No order is waiting: every order has ended.</p>';
  return layout(
    { ...ctx, current: 'dashboard' },
    'Dashboard',
    `<h1>Dashboard <small class="muted">as of ${when(d.now)}</small></h1>
    ${tiles}
    <div class="grid2">
      <section class="card" aria-labelledby="min-in"><h2 id="min-in">Messages in per minute</h2>
        ${minuteBars('Messages in per minute', d.now, d.messagesPerMinute, (m) => `/audit/messages?from=${m}&to=${minuteParam(`${m}:00Z`, -60_000)}`)}</section>
      <section class="card" aria-labelledby="min-out"><h2 id="min-out">Results out per minute</h2>
        ${minuteBars('Outbound documents delivered per minute', d.now, d.resultsPerMinute, () => orders({ state: 'delivered', from: fromHour }))}</section>
    </div>
    <div class="grid3">
      ${countTable('Orders per state', 'by-state', d.ordersByState, (k, from) => orders({ state: k, from }), 'No order in the last day.')}
      ${countTable('Orders per source', 'by-source', d.ordersBySource, (k, from) => orders({ source: k, from }), 'No order in the last day.')}
      ${countTable(
        'Outbound per destination',
        'by-dest',
        d.outboundByDestination,
        (k, from) => {
          const [destination, status] = k.split(' ');
          return status === 'dead'
            ? '/audit/dead-letters'
            : orders({ destination: destination!, from });
        },
        'Nothing sent in the last day.',
      )}
    </div>
    <section class="card" aria-labelledby="waiting-h"><h2 id="waiting-h">Oldest waiting order per state</h2>${waiting}</section>`,
  );
}

function ago(now: string, then: string): string {
  const s = Math.max(0, Math.round((Date.parse(now) - Date.parse(then)) / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  if (s < 172_800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86_400)} days`;
}

export function messageListPage(
  ctx: PageContext,
  input: {
    filters: Record<string, string>;
    messages: MessageRow[];
    nextCursor?: string;
    problem?: string;
  },
): string {
  const f = input.filters;
  const textField = (name: string, label: string, hint = '') =>
    `<label for="m-${name}">${h(label)}<input id="m-${name}" type="text" name="${name}" value="${h(f[name] ?? '')}" autocomplete="off" spellcheck="false"${hint ? ` placeholder="${h(hint)}"` : ''}></label>`;
  const select = (name: string, label: string, values: readonly string[]) =>
    `<label for="m-${name}">${h(label)}<select id="m-${name}" name="${name}"><option value="">any</option>${values
      .map((v) => `<option${f[name] === v ? ' selected' : ''}>${h(v)}</option>`)
      .join('')}</select></label>`;
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
  const query = new URLSearchParams(
    Object.entries(f).filter(([k, v]) => v !== '' && k !== 'cursor'),
  );
  const next = input.nextCursor
    ? `<a class="secondary" href="/audit/messages?${h(new URLSearchParams([...query, ['cursor', input.nextCursor]]).toString())}">Older messages →</a>`
    : '';
  return layout(
    { ...ctx, current: 'messages' },
    'Messages',
    `<h1>Inbound messages and requests</h1>
    ${input.problem ? `<div class="notice err" role="alert">${h(input.problem)}</div>` : ''}
    <section class="card" aria-labelledby="mf-h"><h2 id="mf-h" class="visually-hidden">Filters</h2>
      <form class="filters" method="get" action="/audit/messages" role="search">
        <label for="m-from">Received from (UTC)<input id="m-from" type="datetime-local" name="from" value="${h(f.from ?? '')}"></label>
        <label for="m-to">Received before (UTC)<input id="m-to" type="datetime-local" name="to" value="${h(f.to ?? '')}"></label>
        ${textField('sender', 'Sender', 'RADIS1^IHEDEMO')}
        ${select('transport', 'Transport', ['mllp', 'fhir-rest', 'fhir-subscription'])}
        ${select('outcome', 'Outcome', ['accepted', 'duplicate', 'refused', 'rejected', 'error'])}
        ${textField('answerCode', 'Answer code', 'AA, AE, AR, 400…')}
        ${textField('text', 'Answer text contains')}
        ${textField('msh10', 'MSH-10 control id')}
        <div class="actions"><button class="primary" type="submit">Search</button><a class="secondary" href="/audit/messages">Clear</a></div>
      </form>
    </section>
    <section class="card" aria-labelledby="ml-h">
      <h2 id="ml-h">${input.messages.length ? `${input.messages.length}${input.nextCursor ? '+' : ''} message${input.messages.length === 1 ? '' : 's'}` : 'No messages match'}</h2>
      ${
        input.messages.length
          ? `<table><thead><tr><th scope="col">Received</th><th scope="col">Type</th><th scope="col">MSH-10 / id</th><th scope="col">Sender</th><th scope="col">Transport</th><th scope="col">Outcome</th><th scope="col">Answer</th><th scope="col">Why</th></tr></thead><tbody>${rows}</tbody></table>`
          : '<p class="muted">Widen the time range or clear a filter.</p>'
      }
      <div class="pager"><span class="muted">Newest first; refused messages included</span>${next}</div>
    </section>`,
  );
}

/** Field lineage: target and rule, source location, value (and the table row that produced it). */
function lineageTable(
  lineage: ReadonlyArray<{
    target: string;
    source: string;
    value: string;
    ruleId: string;
    rule?: string;
  }>,
): string {
  return `<table class="lineage"><caption class="visually-hidden">Field lineage: target, source location, value, rule</caption>
        <colgroup><col class="c-target"><col class="c-source"><col class="c-value"></colgroup>
        <thead><tr><th scope="col">Target · rule</th><th scope="col">Source</th><th scope="col">Value</th></tr></thead><tbody>${lineage
          .map(
            (l) =>
              `<tr><td><span class="mono">${pathBreaks(l.target)}</span><div class="rule">${h(l.ruleId)}</div></td><td class="mono src">${pathBreaks(l.source)}</td><td class="v">${h(l.value)}${l.rule ? `<div class="rule">${h(l.rule)}</div>` : ''}</td></tr>`,
          )
          .join('')}</tbody></table>`;
}

/**
 * The dry-run form (a pasted HL7 message or FHIR JSON) and, after a POST, what the front door
 * would answer and map. The caller's own input is shown as pasted (nothing masked, nothing kept).
 */
export function dryRunPage(
  ctx: PageContext,
  form: { kind: 'hl7' | 'fhir'; input: string },
  result?: DryRunResult,
  error?: string,
): string {
  const answer = !result
    ? ''
    : result.answer.kind === 'hl7'
      ? `<section class="card" aria-labelledby="dr-ans-h"><h2 id="dr-ans-h">Our answer <span class="badge">${h(result.answer.code)}</span></h2>
          <pre role="region" aria-label="ACK" tabindex="0">${h(result.answer.text.split('\r').join('\n'))}</pre></section>`
      : `<section class="card" aria-labelledby="dr-ans-h"><h2 id="dr-ans-h">Our answer <span class="badge">HTTP ${h(result.answer.status)}</span></h2>
          <pre role="region" aria-label="FHIR answer" tabindex="0">${h(JSON.stringify(result.answer.body, null, 2))}</pre></section>`;
  const orders = !result
    ? ''
    : result.orders.length === 0
      ? '<section class="card"><p class="muted">No order would be created or changed.</p></section>'
      : result.orders
          .map(
            (
              o,
              i,
            ) => `<section class="card" aria-labelledby="dr-o${i}-h"><h2 id="dr-o${i}-h">Order ${i + 1} <span class="badge">${h(o.request.action)}</span> <small class="muted">${h(o.sourceRef)}</small></h2>
            <div class="grid2">
              <div><h3>OrderRequest</h3><pre>${h(JSON.stringify(o.request, null, 2))}</pre></div>
              <div><h3>Upstream metadata</h3><pre>${h(JSON.stringify(o.upstreamMetadata, null, 2))}</pre></div>
            </div>
            <h3>Field lineage</h3>${o.lineage.length ? lineageTable(o.lineage) : '<p class="muted">No lineage.</p>'}
          </section>`,
          )
          .join('');
  const notes = result
    ? `<div class="notice" role="status"><ul>${result.notes.map((n) => `<li>${h(n)}</li>`).join('')}</ul>${
        result.quirks.length
          ? `<p><strong>Tolerated quirks:</strong> ${result.quirks.map((q) => `${h(q.code)} (${h(q.detail)})`).join('; ')}</p>`
          : ''
      }</div>`
    : '';
  return layout(
    { ...ctx, current: 'dry-run' },
    'Dry run',
    `<h1>Dry run a message</h1>
    <p class="muted">Paste an HL7 v2 order message or a FHIR ServiceRequest / transaction Bundle: see the answer the front door would give, the order it maps to, the field lineage and the metadata the upstream would get, with this site's mapping. Nothing is stored or sent.</p>
    ${error ? `<div class="notice warn" role="alert">${h(error)}</div>` : ''}
    <section class="card"><form class="stack" method="post" action="/audit/dry-run">
      <input type="hidden" name="_csrf" value="${h(ctx.csrfToken ?? '')}">
      <fieldset><legend>Input</legend>
        <label><input type="radio" name="kind" value="hl7"${form.kind === 'hl7' ? ' checked' : ''}> HL7 v2</label>
        <label><input type="radio" name="kind" value="fhir"${form.kind === 'fhir' ? ' checked' : ''}> FHIR JSON</label>
      </fieldset>
      <label for="dry-input">Message</label>
      <textarea id="dry-input" class="paste" name="input" required spellcheck="false">${h(form.input)}</textarea>
      <div class="actions"><button type="submit">Dry run</button></div>
    </form></section>
    ${notes}${answer}${orders}`,
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
