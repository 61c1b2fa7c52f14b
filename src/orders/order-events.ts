import type { EntityManager } from 'typeorm';
import type { StatusRow, StatusRowKey } from '../mappings/status-mapping.table';
import type { OrderState } from '../domain/order-state';
import type { QcBypassDecision } from '../domain/qc-bypass';

export type { QcBypassDecision } from '../domain/qc-bypass';

/**
 * What the lifecycle tells the publishing side (the results/outbox issue), always on the
 * transaction that made the change, so a publication exists exactly when the change was
 * committed. `noOrderEvents` does nothing (OUTBOUND_ENABLED=false); otherwise the
 * outbound module provides ORDER_EVENTS as outbox rows.
 */
export interface OrderSnapshot {
  id: string;
  source: string;
  sender: string | null;
  state: OrderState;
  upstreamOrderId: string | null;
  upstreamBatchId: string | null;
  placerGroupNumber: string | null;
  cancelRequested: boolean;
  /** The order that replaced this one (FHIR `replaces`); absent in payloads stored before. */
  replacedBy?: string | null;
}

export interface OrderStatusChange {
  order: OrderSnapshot;
  previousState: OrderState;
  state: OrderState;
  upstreamStatus: string;
  /** The status-mapping row used (its `publish` list names the documents to send). */
  row: StatusRow & { key: StatusRowKey };
  mappingVersion: string;
  /** Who bypassed QC and why, for the QC_BYPASS row and the final report's caveat. */
  qcBypass: QcBypassDecision | null;
}

export interface StoredDocument {
  id: string;
  kind: 'results' | 'failure' | 'qc';
  reportType: string;
  contentType: string;
}

export interface OrderEvents {
  /** An upstream status was seen for the first time (a state change or not). */
  statusChanged(manager: EntityManager, change: OrderStatusChange): Promise<void>;
  /** Results, failure or QC reports of a status are stored in `order_documents`. */
  documentsStored(
    manager: EntityManager,
    stored: {
      order: OrderSnapshot;
      upstreamStatus: string;
      documents: StoredDocument[];
      /**
       * The mapping row the documents were fetched for. It decides QC_FAILED's row (bypassable
       * or final): the order's state at the time of storing does not, since the order may have
       * moved on (a bypass granted) while the fetch waited for its retries.
       */
      rowKey?: StatusRowKey;
    },
  ): Promise<void>;
  /**
   * The order ended without an upstream status (study never arrived, unusable study,
   * upstream stuck, refused by the upstream, cancelled before it was placed).
   */
  endedLocally(
    manager: EntityManager,
    ended: {
      order: OrderSnapshot;
      state: OrderState;
      /** What the clinic reads (Task, DiagnosticReport, ORU): a clinical sentence. */
      reason: string;
      alert: string | null;
      /** The alert's technical reason, for the person the alert goes to (default `reason`). */
      alertReason?: string;
    },
  ): Promise<void>;
  /**
   * An alert raised on an order without ending it here (it may have ended before: the
   * reports of its status were never fetched). Told like an end's alert (ALERT_WEBHOOK_URL).
   */
  alertRaised(
    manager: EntityManager,
    raised: { order: OrderSnapshot; alert: string; reason: string },
  ): Promise<void>;
  /**
   * A multipart upload that will never be completed (its order ended here): aborted upstream
   * through the outbox, retried with backoff and dead-lettered like any outbound effect, in
   * the caller's transaction. False when nothing was written (publishing disabled here).
   */
  uploadAbandoned(
    manager: EntityManager,
    abandoned: { orderId: string; upstreamOrderId: string; uploadId: string },
  ): Promise<boolean>;
  /** The aggregated report of a batch (placer group / requisition) is stored in `upstream_batches`. */
  batchReportStored(
    manager: EntityManager,
    batch: { sender: string; placerGroupNumber: string; batchId: string; orderIds: string[] },
  ): Promise<void>;
}

export const ORDER_EVENTS = Symbol('ORDER_EVENTS');

/** Until the outbound module lands: nothing is published. */
export const noOrderEvents: OrderEvents = {
  statusChanged: async () => undefined,
  documentsStored: async () => undefined,
  endedLocally: async () => undefined,
  alertRaised: async () => undefined,
  uploadAbandoned: async () => false,
  batchReportStored: async () => undefined,
};
