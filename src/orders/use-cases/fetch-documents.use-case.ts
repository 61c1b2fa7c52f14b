import { knownPhiOf } from '../../audit/phi-known-values';
import { clinicalEndReason } from '../../mappings/local-end-reasons';
import { writeAuditEvents } from '../../persistence/audit-event.repository';
import type { EntityManager } from 'typeorm';
import {
  STATUS_MAPPING_VERSION,
  STATUS_TABLE,
  statusRow,
  type StatusRow,
  type StatusRowKey,
} from '../../mappings/status-mapping.table';
import { checkUpstreamReport } from '../../mappings/upstream-documents.check';
import type { BudgetDeferral } from '../budget-deferral';
import { LIFECYCLE_JOBS } from '../lifecycle-jobs';
import type { StoredDocument } from '../order-events';
import { orderAlerts } from '../order-metrics';
import { loadOrder, snapshot, stateOf } from '../order-transitions';
import { describe, isTransient } from '../upstream-errors';
import type { LifecycleDeps } from './lifecycle-deps';
import { alertEvent } from '../alert-event';

/** `order.fetch-documents`: the documents of a status, fetched and stored once. */
export class FetchDocumentsUseCase {
  constructor(
    private readonly deps: LifecycleDeps,
    private readonly budget: BudgetDeferral,
  ) {}

  private get client() {
    return this.deps.imaging.client;
  }

  /**
   * Results, failure or QC reports of a status, fetched once. They are stored in one
   * transaction with the publishing side's `documentsStored`, so a stored document means its
   * publications are durable too: the poller acknowledges upstream reports (`POST /reports`)
   * only for documents stored here.
   *
   * `order_documents.upstream_status` holds the mapping row key: the upstream status itself,
   * except for QC_FAILED's two rows, so that the final QC verdict stores (and publishes) its
   * QC report even when the bypassable row already stored one.
   */
  async fetchDocuments(
    orderId: string,
    upstreamStatus: string,
    rowKey: StatusRowKey,
  ): Promise<void> {
    const { dataSource, events } = this.deps;
    const order = await loadOrder(dataSource.manager, orderId);
    if (!order?.upstream_order_id) return;
    const storedAs: string = rowKey;
    const have = await this.deps.documents.storedFor(orderId, storedAs);
    const wanted = documentsFor(rowKey).filter(
      (d) => !have.some((h) => h.kind === d.kind && h.report_type === d.reportType),
    );
    if (wanted.length === 0) {
      // Every document of the row is stored, by an earlier run: the row is marked fetched all
      // the same (an order whose mark was lost, or an older row's, is not given a documents job
      // by every sweep for good).
      if (have.length > 0 && order.documents_fetched_for !== storedAs) {
        await this.deps.orders.setDocumentsFetchedFor(
          orderId,
          storedAs,
          undefined,
          keptMarks(rowKey),
        );
      }
      return;
    }
    const first = wanted[0]!.kind;
    const firstCall =
      first === 'results' ? '/results' : first === 'failure' ? '/failure-report' : '/qc-report';
    if (
      await this.budget.deferForBudget(
        firstCall,
        LIFECYCLE_JOBS.fetchDocuments,
        { orderId, upstreamStatus, rowKey },
        `documents:${orderId}:${rowKey}`,
      )
    ) {
      return;
    }
    const ref = { orderId: order.upstream_order_id };
    const fetched: Array<{
      kind: StoredDocument['kind'];
      reportType: string;
      body: Buffer;
      contentType: string;
    }> = [];
    const missing: string[] = [];
    for (const doc of wanted) {
      try {
        if (doc.kind === 'results') {
          const d = await this.client.getResults(ref, doc.reportType as 'JSON');
          fetched.push({ ...doc, body: d.body, contentType: d.contentType });
        } else if (doc.kind === 'failure') {
          const d = await this.client.getFailureReport(ref, doc.reportType as 'JSON');
          fetched.push({ ...doc, body: d.body, contentType: d.contentType });
        } else {
          const qc = await this.client.getQcReport(order.upstream_order_id, 'results', 'latest');
          fetched.push({
            ...doc,
            body: Buffer.from(JSON.stringify({ round: qc.round, report: qc.report })),
            contentType: 'application/json',
          });
        }
      } catch (error) {
        if (isTransient(error)) throw error;
        missing.push(
          `${doc.kind} ${doc.reportType}: ${describe(error, knownPhiOf(order.request, order.retired_patient_identifiers))}`,
        );
      }
    }
    // Nothing is stored (so nothing published) that is not what was asked for, or that is about
    // another order, study, patient or accession: one such report refuses every document
    // fetched with it.
    const expected = {
      upstreamOrderId: order.upstream_order_id,
      studyUids: await this.deps.orders.studyUidsOf(orderId),
      // The order's identifiers and those an ADT^A40 merged away: a report written from the
      // create's metadata names the record number the order had then (this patient's).
      patientIds: [
        ...(order.request.patient?.identifiers ?? []),
        ...(order.retired_patient_identifiers ?? []),
      ].map((i) => i.value),
      accessionNumber: order.request.accessionNumber,
    };
    const checks = fetched.map((doc) => ({ doc, check: checkUpstreamReport(doc, expected) }));
    const foreign = checks.find((c) => !c.check.accepted && c.check.foreign);
    const accepted: typeof fetched = [];
    const notes: string[] = [];
    for (const { doc, check } of checks) {
      if (foreign && foreign.doc !== doc) {
        missing.push(
          `${doc.kind} ${doc.reportType}: refused with the ${foreign.doc.kind} ${foreign.doc.reportType} report`,
        );
      } else if (!check.accepted) {
        missing.push(`${doc.kind} ${doc.reportType}: refused: ${check.reason}`);
      } else {
        accepted.push(doc);
        if (check.notes?.length)
          notes.push(`${doc.kind} ${doc.reportType}: ${check.notes.join('; ')}`);
      }
    }
    const row: StatusRow = STATUS_TABLE[rowKey];
    const expired =
      rowKey === 'DELIVERED' &&
      have.length === 0 &&
      accepted.length === 0 &&
      !foreign &&
      (await this.expired(ref));
    let refusedAlert = false;
    // A result delivered after the orderer's cancel (the order ended `cancelled`, alert
    // result-after-cancel) is kept for the analyst, never published.
    const keptOnly = rowKey === 'DELIVERED' && stateOf(order) === 'cancelled';
    await dataSource.transaction(async (manager) => {
      const stored: StoredDocument[] = [];
      for (const doc of accepted) {
        const row = await this.deps.documents.insertOnce(
          {
            orderId,
            storedAs,
            kind: doc.kind,
            reportType: doc.reportType,
            contentType: doc.contentType,
            body: doc.body,
          },
          manager,
        );
        if (row) {
          stored.push({
            id: String(row.id),
            kind: doc.kind,
            reportType: doc.reportType,
            contentType: doc.contentType,
          });
        }
      }
      await this.deps.orders.setDocumentsFetchedFor(orderId, storedAs, manager, keptMarks(rowKey));
      await writeAuditEvents(manager, [
        {
          kind: 'order.documents-fetched',
          orderId,
          severity: foreign ? 'error' : missing.length + notes.length > 0 ? 'warning' : 'info',
          actor: 'adapter',
          summary:
            `${stored.length} document(s) stored for ${upstreamStatus}` +
            (missing.length > 0 ? `; not available: ${missing.join('; ')}` : '') +
            (notes.length > 0 ? `; left out of the published results: ${notes.join('; ')}` : '') +
            (foreign && row.report === 'final'
              ? '; no result is published from these reports'
              : '') +
            (expired ? '; the upstream order has EXPIRED: no result is coming' : '') +
            (keptOnly
              ? '; the order was cancelled by its orderer: kept for the analyst, not published'
              : ''),
          detail: {
            upstreamStatus,
            documents: stored.map((d) => `${d.kind}/${d.reportType}`),
            bytes: fetched.reduce((n, d) => n + d.body.length, 0),
            missing,
            ...(notes.length > 0 ? { leftOut: notes } : {}),
          },
        },
      ]);
      if (expired) {
        await this.endExpired(manager, orderId);
        return;
      }
      if (!foreign && missing.length === 0 && stored.length > 0) {
        await this.clearDocumentsAlert(manager, orderId, rowKey);
      }
      if (foreign && rowKey === 'DELIVERED' && have.length === 0 && stored.length === 0) {
        const refused = `${foreign.doc.kind} ${foreign.doc.reportType}`;
        refusedAlert = await endRefusedOrder(this.deps, manager, orderId, refused);
        return;
      }
      // A no-result end (failure, final QC rejection) is published with the reports it has,
      // or with none: the clinic must hear that no result is coming even when no report of it
      // could be fetched or kept. A result is never published without its report.
      if (!keptOnly && (stored.length > 0 || (row.terminal && row.report === 'cancelled'))) {
        await events.documentsStored(manager, {
          order: snapshot(order),
          upstreamStatus,
          documents: stored,
          rowKey,
        });
      }
    });
    if (refusedAlert) {
      orderAlerts.inc({ alert: 'results-refused' });
      this.deps.logger.error({ orderId, alert: 'results-refused' }, 'order results refused');
    }
  }

  /**
   * Every document of a row is now stored: alert `documents-not-fetched` (raised by the sweep
   * when a documents job used every attempt) no longer holds, unless another row's documents
   * job of the order is still out of attempts. It is cleared, and the analyst reads why on the
   * timeline (before, the order kept it, and with it the "no result is coming" reason, after
   * its results had been stored and published).
   */
  private async clearDocumentsAlert(
    manager: EntityManager,
    orderId: string,
    rowKey: StatusRowKey,
  ): Promise<void> {
    const alert = 'documents-not-fetched';
    const current = await loadOrder(manager, orderId, true);
    if (current?.alert !== alert) return;
    if (await this.deps.orders.hasExhaustedDocumentJob(orderId, manager)) return;
    if (!(await this.deps.orders.clearAlert(orderId, alert, manager))) return;
    await writeAuditEvents(manager, [
      {
        kind: 'order.alert-cleared',
        orderId,
        severity: 'info',
        actor: 'adapter',
        summary: `${alert} cleared: the upstream's reports for ${rowKey} were fetched and stored on a later run`,
        detail: { alert, mappingRow: rowKey, previousReason: current.last_error },
      },
    ]);
    this.deps.logger.info({ orderId, alert }, 'order alert cleared');
  }

  /**
   * Whether the upstream order is EXPIRED ("can no longer be retrieved", contract "States"),
   * asked when DELIVERED gave no results report: it expired between the poll that saw DELIVERED
   * and this fetch (the sandbox: 5 s after delivery; a backlog of jobs or an adapter stopped
   * for a while does the same). An answer that is not this order's status is taken as no.
   */
  private async expired(ref: { orderId: string }): Promise<boolean> {
    try {
      return (await this.client.getStatus(ref)).status === 'EXPIRED';
    } catch (error) {
      if (isTransient(error)) throw error;
      return false;
    }
  }

  /**
   * DELIVERED whose results expired unfetched: the clinic is told what the EXPIRED row says
   * (Task failed, DiagnosticReport cancelled, ORU OBR-25 X), superseding the Task `completed`
   * sent at DELIVERED. Before, that Task stayed completed with its output naming a
   * DiagnosticReport that never came, and the RIS never heard of the order again. The order
   * keeps its state (an end has no way out, ORDER_TRANSITIONS) with its upstream status
   * EXPIRED and an alert naming the row published, so the analyst sees why no result came.
   */
  private async endExpired(manager: EntityManager, orderId: string): Promise<void> {
    const order = await loadOrder(manager, orderId, true);
    if (!order || stateOf(order) !== 'delivered' || order.upstream_status === 'EXPIRED') return;
    const row = statusRow('EXPIRED');
    await this.deps.orders.recordUpstreamStatus(orderId, 'EXPIRED', manager);
    await writeAuditEvents(manager, [
      alertEvent(
        orderId,
        'results-expired',
        'the upstream order EXPIRED before the results of DELIVERED were fetched; published as EXPIRED (no result)',
        {
          upstreamStatus: 'EXPIRED',
          previousUpstreamStatus: order.upstream_status,
          mappingRow: row.key,
          mappingVersion: STATUS_MAPPING_VERSION,
          taskStatus: row.task.status,
          publish: row.publish,
        },
      ),
    ]);
    await this.deps.events.statusChanged(manager, {
      order: snapshot(order),
      previousState: 'delivered',
      state: 'delivered',
      upstreamStatus: 'EXPIRED',
      row,
      mappingVersion: STATUS_MAPPING_VERSION,
      qcBypass: order.qc_bypass,
    });
  }
}

/**
 * DELIVERED whose results were all refused (a report about another order or study, or
 * another kind of report): nothing of them is published, and without more the clinic kept the
 * Task `completed` sent at DELIVERED, its output naming a DiagnosticReport that never came.
 * Now it is told what an order that could not be processed is told (ENDED_LOCALLY_FAILED:
 * Task failed, DiagnosticReport cancelled, ORU OC/CA with OBR-25 X, with the clinical sentence
 * of `results-refused`), and the analyst gets alert `results-refused` (once) with the reason. The reason names what was refused, never a
 * value of the foreign report. The order keeps its end state `delivered` (ORDER_TRANSITIONS).
 */
async function endRefusedOrder(
  deps: LifecycleDeps,
  manager: EntityManager,
  orderId: string,
  refused: string,
): Promise<boolean> {
  const order = await loadOrder(manager, orderId, true);
  if (!order || stateOf(order) !== 'delivered') return false;
  const alert = 'results-refused';
  const reason = `the results the analysis service returned were refused (the ${refused} report is not this order's results); no result is published`;
  if (!(await deps.orders.raiseAlert(orderId, alert, reason, manager))) return false;
  await writeAuditEvents(manager, [
    alertEvent(orderId, alert, `${reason}; published as ENDED_LOCALLY_FAILED (no result)`, {
      upstreamStatus: order.upstream_status,
      mappingRow: 'ENDED_LOCALLY_FAILED',
      mappingVersion: STATUS_MAPPING_VERSION,
    }),
  ]);
  // The clinic reads the sentence of CLINICAL_END_REASONS, not which report was refused.
  await deps.events.endedLocally(manager, {
    order: snapshot(order),
    state: 'failed',
    reason: clinicalEndReason('failed', alert),
    alert,
    alertReason: reason,
  });
  return true;
}

/**
 * The marks (`documents_fetched_for`) a documents job of `rowKey` leaves in place: those of an
 * end (a terminal row) other than its own. An order has one end, and once its documents are
 * marked the mark only stays or is set again by that row. Before, the mark was the last row
 * any job stored documents for: a QC report job of QC_FAILED_BYPASSABLE that waited out its
 * back-off while the order went on to DELIVERED ran after the results job and set the mark
 * back to its own row; the sweep (deliveredWithoutDocumentsJob) then took the results for
 * never fetched and enqueued a documents job again, with a "job was missing" warning.
 */
function keptMarks(rowKey: StatusRowKey): StatusRowKey[] {
  return (Object.keys(STATUS_TABLE) as StatusRowKey[]).filter(
    (k) => k !== rowKey && STATUS_TABLE[k].terminal,
  );
}

function documentsFor(
  rowKey: StatusRowKey,
): Array<{ kind: StoredDocument['kind']; reportType: string }> {
  switch (rowKey) {
    case 'DELIVERED':
      return [
        { kind: 'results', reportType: 'JSON' },
        { kind: 'results', reportType: 'PDF' },
      ];
    case 'FAILED':
    case 'PREPROCESSING_FAILED':
      return [
        { kind: 'failure', reportType: 'JSON' },
        { kind: 'failure', reportType: 'PDF' },
      ];
    case 'QC_FAILED_BYPASSABLE':
    case 'QC_FAILED_FINAL':
      return [{ kind: 'qc', reportType: 'results' }];
    case 'RECEIVED':
    case 'QUEUED':
    case 'PENDING':
    case 'ELIGIBILITY_CHECK_RUNNING':
    case 'QC_PASSED':
    case 'PREPROCESSING':
    case 'ANALYSIS_RUNNING':
    case 'QC_BYPASS':
    case 'IN_REVIEW':
    case 'CANCELLED':
    case 'EXPIRED':
      return [];
    default:
      return rowKey satisfies never;
  }
}
