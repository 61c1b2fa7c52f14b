import type { Role } from '../config/app-config';
import { prettyJson, type RawView } from './audit-presenter.raw';
import type { EventRow } from './audit-query.service';

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

/**
 * The directional formatting characters (embeddings and overrides U+202A-U+202E, isolates
 * U+2066-U+2069). Inside a value they redraw what follows: `ACC-` U+202E `4321` reads as
 * `ACC-1234`, an identifier the order does not have.
 */
/**
 * …and the control characters but TAB, LF and CR (C0, DEL), which the raw message keeps as
 * sent: drawn as they are, an ESC or a backspace in `PLC-<ESC>[2J<BS>X` was invisible (and a
 * NUL is not allowed in HTML), so the value read and copied was not the one sent.
 */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const SHOWN_AS_MARKS = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f\u202a-\u202e\u2066-\u2069]/g;

/**
 * HTML-escapes text for element content and quoted attribute values; a directional
 * formatting character or a control character is shown as a visible mark (`[U+202E]`,
 * `[U+001B]`), so every value reads as the characters it holds, in their order.
 */
export function h(value: unknown): string {
  return hExact(value).replace(
    SHOWN_AS_MARKS,
    (c) => `[U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}]`,
  );
}

/**
 * HTML-escapes text as it is, for the value of a form field (what the analyst typed or
 * pasted, sent again as it was).
 */
export function hExact(value: unknown): string {
  return String(value ?? '')
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

export const STYLE = `
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
h1{font-size:1.35rem;margin:.25rem 0 1rem;overflow-wrap:anywhere}
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
td{overflow-wrap:anywhere}
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

export function layout(ctx: PageContext, title: string, body: string): string {
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

export function navLink(href: string, text: string, current: boolean): string {
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

export function stateBadge(state: string): string {
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

export function severityBadge(severity: string): string {
  const tone = severity === 'error' ? 'err' : severity === 'warning' ? 'warn' : 'info';
  return `<span class="badge ${tone}">${h(severity)}</span>`;
}

export function when(iso: string | null | undefined): string {
  if (!iso) return '';
  return `<time datetime="${h(iso)}">${h(iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z'))}</time>`;
}

export function outcomeBadge(outcome: string): string {
  const tone = outcome === 'accepted' ? 'ok' : outcome === 'duplicate' ? 'info' : 'err';
  return `<span class="badge ${tone}">${h(outcome)}</span>`;
}

/** What a bounded raw view left out (RAW_VIEW_LIMITS), said above it. */
function cutNotice(view: RawView): string {
  if (view.format === 'json' || !view.cut) return '';
  const c = view.cut;
  const n = (v: number) => v.toLocaleString('en-US');
  const segments = c.totalSegments
    ? ` and ${n(c.shownSegments)} of ${n(c.totalSegments)} segments`
    : '';
  return `<div class="notice warn" role="status">Only the first ${n(c.shownCharacters)} of ${n(c.totalCharacters)} characters${segments} are shown: the rest is too large to draw here (it is stored whole).</div>`;
}

export function rawBlock(view: RawView, label: string): string {
  return `${cutNotice(view)}${rawBody(view, label)}`;
}

function rawBody(view: RawView, label: string): string {
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

export function jsonDetails(value: unknown, summary = 'details'): string {
  if (!value || (typeof value === 'object' && Object.keys(value).length === 0)) return '';
  return `<details><summary>${h(summary)}</summary><pre>${h(prettyJson(value))}</pre></details>`;
}

export function timelineList(events: EventRow[]): string {
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

export function revealForm(ctx: PageContext, action: string, masked: boolean): string {
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

/** A source path with break opportunities after dots, brackets and spaces (never mid-name). */
export function pathBreaks(path: string): string {
  return h(path).replace(/([./\]\s])/g, '$1<wbr>');
}

/** Field lineage: target and rule, source location, value (and the table row that produced it). */
export function lineageTable(
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
