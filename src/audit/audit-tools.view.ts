import type { DryRunResult } from './audit-api.dry-run';
import type { MappingTableView } from './mapping-tables.view';
import { type PageContext, h, hExact, layout, lineageTable } from './audit-page.layout';

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
              <div><h3>Upstream metadata</h3>${o.upstreamMetadataNote ? `<p class="notice">${h(o.upstreamMetadataNote)}</p>` : ''}<pre>${h(JSON.stringify(o.upstreamMetadata, null, 2))}</pre></div>
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
      <textarea id="dry-input" class="paste" name="input" required spellcheck="false">${hExact(form.input)}</textarea>
      <div class="actions"><button type="submit">Dry run</button></div>
    </form></section>
    ${notes}${answer}${orders}`,
  );
}
