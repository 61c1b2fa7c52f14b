import { CLINICAL_REPLACED } from '../mappings/local-end-reasons';
import type { EntityManager } from 'typeorm';
import {
  applyOverride,
  localEndRow,
  waitsForDocuments,
  type OutboundRow,
} from '../mappings/outbound-rows';
import {
  STATUS_MAPPING_VERSION,
  statusRow,
  type PublishedDocument,
  type StatusRowKey,
} from '../mappings/status-mapping.table';
import { isUpstreamStatus } from '../imaging-spec/imaging-spec';
import type {
  OrderEvents,
  OrderSnapshot,
  OrderStatusChange,
  QcBypassDecision,
  StoredDocument,
} from '../orders/order-events';
import { type NewOutboxEntry, OutboxRepository } from '../persistence/outbox.repository';
import { PublicationRepository } from '../persistence/publication.repository';
import { orderAlertPayload } from './alert-webhook.publisher';
import { UPLOAD_ABORT_KIND, type UploadAbortPayload } from './upload-abort.publisher';
import { DESTINATIONS, type Destination, type OutboundSettings } from './outbound.settings';

/** What an outbox row carries: enough to render the document at delivery time. */
export interface OutboxPayload {
  orderId: string;
  rowKey: OutboundRow['key'];
  /** The row as it was (with the site's overrides) when the change happened. */
  row: OutboundRow;
  upstreamStatus: string | null;
  mappingVersion: string;
  statusAt: string;
  documentIds: string[];
  /** 0 for the first result publication, +1 for each resend after an upstream correction. */
  revision: number;
  reason?: string;
  qcBypass?: QcBypassDecision | null;
}

export function destinationOf(doc: PublishedDocument): Destination {
  switch (doc) {
    case 'fhir-task':
    case 'fhir-diagnostic-report':
      return DESTINATIONS.fhir;
    case 'hl7-oru':
    case 'hl7-orm-status':
      return DESTINATIONS.hl7;
    case 'dicom-sr':
    case 'dicom-pdf':
      return DESTINATIONS.dicom;
    default:
      return doc satisfies never;
  }
}

/**
 * The publishing side of the lifecycle: every change becomes outbox rows on the caller's
 * transaction (a publication exists exactly when the change was committed). Documents that
 * need the upstream's reports (results, failure, QC report of a terminal row) are written
 * when those are stored; the Task and the ORM status message go out at the status change.
 */
export class OutboxOrderEvents implements OrderEvents {
  constructor(
    private readonly settings: OutboundSettings,
    /** Called after rows were written (the workers poll soon after). */
    private readonly onWritten: () => void = () => undefined,
  ) {}

  async statusChanged(manager: EntityManager, change: OrderStatusChange): Promise<void> {
    const row = applyOverride(change.row, this.settings.overrides);
    const docs = row.publish.filter((d) => !waitsForDocuments(row, d));
    await this.write(manager, change.order, row, docs, {
      upstreamStatus: change.upstreamStatus,
      mappingVersion: change.mappingVersion,
      qcBypass: change.qcBypass,
      documentIds: [],
    });
  }

  async documentsStored(
    manager: EntityManager,
    stored: {
      order: OrderSnapshot;
      upstreamStatus: string;
      documents: StoredDocument[];
      rowKey?: StatusRowKey;
    },
  ): Promise<void> {
    if (!isUpstreamStatus(stored.upstreamStatus)) return;
    // QC_FAILED documents belong to the bypassable or the final row: the row they were fetched
    // for says which (a QC report of the bypassable row stored after a bypass moved the order
    // on was published as the final rejection: ORU OC/CA, Task failed, while it was analysed);
    // without one, the order's state.
    const current = await new PublicationRepository(manager).orderState<QcBypassDecision>(
      stored.order.id,
    );
    const state = current?.state ?? stored.order.state;
    const row = applyOverride(
      statusRow(stored.upstreamStatus, {
        qcBypassPossible: stored.rowKey
          ? stored.rowKey === 'QC_FAILED_BYPASSABLE'
          : state === 'qc-hold',
        cancelRequestedByOrderer: stored.order.cancelRequested,
      }),
      this.settings.overrides,
    );
    if (!row.terminal) return;
    // No PDF stored (none came, or it was refused as not a PDF): no encapsulated PDF to send,
    // rather than a dead letter saying so; the documents-fetched audit event says why.
    const hasPdf = stored.documents.some((d) => d.reportType === 'PDF');
    const docs = row.publish.filter(
      (d) => waitsForDocuments(row, d) && (d !== 'dicom-pdf' || hasPdf),
    );
    await this.write(manager, stored.order, row, docs, {
      upstreamStatus: stored.upstreamStatus,
      mappingVersion: STATUS_MAPPING_VERSION,
      qcBypass: current?.qc_bypass ?? null,
      documentIds: stored.documents.map((d) => d.id).sort(),
    });
  }

  async endedLocally(
    manager: EntityManager,
    ended: {
      order: OrderSnapshot;
      state: string;
      reason: string;
      alert: string | null;
      alertReason?: string;
    },
  ): Promise<void> {
    if (ended.alert) {
      // The person the alert goes to reads the technical reason; the clinic, `reason`.
      await this.insertAlert(
        manager,
        ended.order.id,
        ended.alert,
        ended.state,
        ended.alertReason ?? ended.reason,
      );
    }
    if (ended.state !== 'failed' && ended.state !== 'cancelled') return;
    const row = applyOverride(
      localEndRow(ended.state, { cancelRequestedByOrderer: ended.order.cancelRequested }),
      this.settings.overrides,
    );
    await this.write(manager, ended.order, row, row.publish, {
      upstreamStatus: null,
      mappingVersion: STATUS_MAPPING_VERSION,
      reason: ended.reason,
      documentIds: [],
    });
  }

  async alertRaised(
    manager: EntityManager,
    raised: { order: OrderSnapshot; alert: string; reason: string },
  ): Promise<void> {
    await this.insertAlert(
      manager,
      raised.order.id,
      raised.alert,
      raised.order.state,
      raised.reason,
    );
  }

  async uploadAbandoned(
    manager: EntityManager,
    abandoned: { orderId: string; upstreamOrderId: string; uploadId: string },
  ): Promise<boolean> {
    await new OutboxRepository(manager).insert([
      {
        orderId: abandoned.orderId,
        destination: DESTINATIONS.upstream,
        kind: UPLOAD_ABORT_KIND,
        dedupeKey: `${UPLOAD_ABORT_KIND}:${abandoned.uploadId}`,
        payload: {
          upstreamOrderId: abandoned.upstreamOrderId,
          uploadId: abandoned.uploadId,
        } satisfies UploadAbortPayload,
      },
    ]);
    this.onWritten();
    return true;
  }

  /** An order alert (deadline, stuck upstream, refusal, …) to a person: ALERT_WEBHOOK_URL. */
  private async insertAlert(
    manager: EntityManager,
    orderId: string,
    alert: string,
    state: string,
    reason: string,
  ): Promise<void> {
    if (!this.settings.destinations.includes(DESTINATIONS.alert)) return;
    await new OutboxRepository(manager).insert([
      {
        orderId,
        destination: DESTINATIONS.alert,
        kind: 'order-alert',
        dedupeKey: `order-alert:${orderId}:${alert}`,
        payload: orderAlertPayload({ orderId, alert, state, reason }),
      },
    ]);
    this.onWritten();
  }

  /** Batch reports are kept for the analysts (audit); no destination receives them yet. */
  async batchReportStored(): Promise<void> {}

  private async write(
    manager: EntityManager,
    order: OrderSnapshot,
    row: OutboundRow,
    docs: readonly PublishedDocument[],
    extra: {
      upstreamStatus: string | null;
      mappingVersion: string;
      documentIds: string[];
      reason?: string;
      qcBypass?: QcBypassDecision | null;
    },
  ): Promise<void> {
    const wanted = docs.filter(
      (d) =>
        this.settings.destinations.includes(destinationOf(d)) &&
        (d !== 'hl7-orm-status' || this.settings.ormStatusMessages),
    );
    if (wanted.length === 0) return;
    // How many result publications this order had: a later one is a correction.
    const outbox = new OutboxRepository(manager);
    const counts = await outbox.countByKind(order.id);
    const countOf = (kind: string) => counts.find((c) => c.kind === kind)?.n ?? 0;
    const isResult = row.report === 'final' || row.report === 'corrected';
    const revision = isResult ? Math.max(0, ...counts.map((c) => c.results)) : 0;
    const statusAt = new Date().toISOString();
    // A replaced order's cancel (upstream CANCELLED or ended here) says it was replaced: "the
    // order was cancelled" alone read as if the analysis had been called off.
    const reason =
      order.replacedBy && row.task.status === 'cancelled' ? CLINICAL_REPLACED : extra.reason;
    const entries: NewOutboxEntry[] = [];
    for (const doc of wanted) {
      const kind = doc;
      const payload: OutboxPayload = {
        orderId: order.id,
        rowKey: row.key,
        row,
        upstreamStatus: extra.upstreamStatus,
        mappingVersion: extra.mappingVersion,
        statusAt,
        documentIds: extra.documentIds,
        revision,
        ...(reason ? { reason } : {}),
        ...(extra.qcBypass ? { qcBypass: extra.qcBypass } : {}),
      };
      const discriminator =
        extra.documentIds.length > 0 ? `d${extra.documentIds.join('.')}` : `s${countOf(kind)}`;
      entries.push({
        orderId: order.id,
        destination: destinationOf(doc),
        kind,
        dedupeKey: `${kind}:${order.id}:${row.key}:${discriminator}`,
        payload,
      });
    }
    await outbox.insert(entries);
    this.onWritten();
  }
}
