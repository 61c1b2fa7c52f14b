import { type PageContext, h, layout, stateBadge, when } from './audit-page.layout';

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
