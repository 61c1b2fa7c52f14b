import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DataSource, EntityManager } from 'typeorm';
import { localEndRow } from '../../src/mappings/outbound-rows';
import { STATUS_MAPPING_VERSION, statusRow } from '../../src/mappings/status-mapping.table';
import type { UpstreamStatus } from '../../src/imaging-spec/imaging-spec';
import type { OrderSnapshot, StoredDocument } from '../../src/orders/order-events';
import type { OrderRequest } from '../../src/domain/order-request';
import type { OutboxOrderEvents } from '../../src/outbound/outbox-order-events';
import { DESTINATIONS, type OutboundSettings } from '../../src/outbound/outbound.settings';
import type { SourceStudy } from '../../src/outbound/dicom-result.builder';
import { publicationInput, REPORT_PDF, RESULTS_JSON } from './publication-fixtures';

const ORM = readFileSync(join(__dirname, '..', 'fixtures', 'hl7', 'orm-o01-v231-ihe-swf-zds.hl7'));

/** Outbound settings for tests: FHIR only, fast retries (4 attempts, 20–80 ms), no devices. */
export function testOutboundSettings(overrides: Partial<OutboundSettings> = {}): OutboundSettings {
  return {
    destinations: [DESTINATIONS.fhir],
    overrides: {},
    ormStatusMessages: false,
    hl7: {
      sendingApplication: 'IMAGING-AI-ADAPTER',
      sendingFacility: 'ADAPTER',
      defaultVersion: '2.5.1',
      textType: 'TX',
    },
    maxAttempts: 4,
    alertCoalesceMs: 0,
    pdfEmbedMaxBytes: 5 * 1024 * 1024,
    backoffBaseMs: 20,
    backoffMaxMs: 80,
    devices: {},
    deviceDefaults: { manufacturer: 'Imaging Analysis Service', version: 'unknown' },
    ...overrides,
  };
}

export interface SeededOrder {
  id: string;
  snapshot: OrderSnapshot;
}

/**
 * An order as the lifecycle leaves it: placed over MLLP (raw ORM kept), its study acquired
 * (attributes and instances recorded), ready for status changes.
 */
export async function seedOrder(
  dataSource: DataSource,
  options: { source?: SourceStudy; request?: Partial<OrderRequest>; hl7?: Buffer | null } = {},
): Promise<SeededOrder> {
  const id = randomUUID();
  const base = publicationInput('DELIVERED').order;
  const request: OrderRequest = { ...base.request, ...options.request };
  const studyUid = options.source?.attributes.studyInstanceUid ?? request.studyInstanceUid ?? null;
  let messageId: string | null = null;
  if (options.hl7 !== null) {
    const rows: Array<{ id: string }> = await dataSource.query(
      `INSERT INTO inbound_messages (transport, sender, message_type, message_control_id, raw, outcome)
       VALUES ('mllp', 'RIS|HOSP', 'ORM^O01', $1, $2, 'accepted') RETURNING id`,
      [`CTL-${id.slice(0, 8)}`, options.hl7 ?? ORM],
    );
    messageId = rows[0]!.id;
  }
  await dataSource.query(
    `INSERT INTO orders (id, source, sender, inbound_message_id, state, upstream_order_id, upstream_status,
                         accession_number, patient_id, placer_order_number, filler_order_number, study_instance_uid, request)
     VALUES ($1, $2, 'RIS|HOSP', $3, 'processing', $4, 'ANALYSIS_RUNNING', $5, $6, $7, $8, $9, $10::jsonb)`,
    [
      id,
      request.source,
      messageId,
      randomUUID(),
      request.accessionNumber ?? null,
      request.patient.identifiers[0]?.value ?? null,
      request.placerOrderNumber?.value ?? null,
      request.fillerOrderNumber?.value ?? null,
      studyUid,
      JSON.stringify(request),
    ],
  );
  if (options.source) {
    await dataSource.query(
      `INSERT INTO study_acquisitions (order_id, state, source, study_instance_uid, study)
       VALUES ($1, 'released', 'dicomweb', $2, $3::jsonb)`,
      [
        id,
        studyUid,
        JSON.stringify({
          studyInstanceUid: studyUid,
          packagePath: '/nonexistent',
          sizeBytes: 0,
          instanceCount: options.source.instances.length,
          seriesCount: 1,
          instances: options.source.instances,
          attributes: options.source.attributes,
          source: 'dicomweb',
        }),
      ],
    );
  }
  return {
    id,
    snapshot: {
      id,
      source: request.source,
      sender: 'RIS|HOSP',
      state: 'processing',
      upstreamOrderId: null,
      upstreamBatchId: null,
      placerGroupNumber: null,
      cancelRequested: false,
    },
  };
}

/** Stores upstream documents as the lifecycle's fetchDocuments does. */
export async function storeDocuments(
  manager: EntityManager,
  orderId: string,
  upstreamStatus: string,
  docs: Array<{
    kind: StoredDocument['kind'];
    reportType: string;
    contentType: string;
    body: Buffer;
  }>,
): Promise<StoredDocument[]> {
  const out: StoredDocument[] = [];
  for (const d of docs) {
    const rows: Array<{ id: string }> = await manager.query(
      `INSERT INTO order_documents (order_id, upstream_status, kind, report_type, content_type, body)
       VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
      [orderId, upstreamStatus, d.kind, d.reportType, d.contentType, d.body],
    );
    out.push({
      id: String(rows[0]!.id),
      kind: d.kind,
      reportType: d.reportType,
      contentType: d.contentType,
    });
  }
  return out;
}

export interface UpstreamDocument {
  kind: StoredDocument['kind'];
  reportType: string;
  contentType: string;
  body: Buffer;
}

export const RESULT_DOCS: UpstreamDocument[] = [
  {
    kind: 'results' as const,
    reportType: 'JSON',
    contentType: 'application/json',
    body: RESULTS_JSON,
  },
  { kind: 'results' as const, reportType: 'PDF', contentType: 'application/pdf', body: REPORT_PDF },
];
export const FAILURE_DOCS: UpstreamDocument[] = [
  {
    kind: 'failure' as const,
    reportType: 'JSON',
    contentType: 'application/json',
    body: Buffer.from(
      JSON.stringify({
        report_kind: 'failure',
        status: 'FAILED',
        failed_step: 'ANALYSIS_RUNNING',
        reason: 'segmentation did not converge',
      }),
    ),
  },
  { kind: 'failure' as const, reportType: 'PDF', contentType: 'application/pdf', body: REPORT_PDF },
];
export const QC_DOCS: UpstreamDocument[] = [
  {
    kind: 'qc' as const,
    reportType: 'results',
    contentType: 'application/json',
    body: Buffer.from(
      JSON.stringify({
        round: 1,
        verdict: 'rejected',
        checks: [{ name: 'slice_thickness', passed: false, detail: '5 mm > 1.5 mm' }],
      }),
    ),
  },
];

/**
 * Plays one upstream status (and its documents) through the events, as the lifecycle does:
 * the status change in one transaction, the documents in a later one.
 */
export async function playStatus(
  dataSource: DataSource,
  events: OutboxOrderEvents,
  order: SeededOrder,
  status: UpstreamStatus,
  options: { qcBypassPossible?: boolean; documents?: UpstreamDocument[] } = {},
): Promise<void> {
  const row = statusRow(status, { qcBypassPossible: options.qcBypassPossible ?? false });
  await dataSource.transaction(async (manager) => {
    await manager.query(`UPDATE orders SET state = $2, upstream_status = $3 WHERE id = $1`, [
      order.id,
      row.orderState,
      status,
    ]);
    await events.statusChanged(manager, {
      order: order.snapshot,
      previousState: order.snapshot.state,
      state: row.orderState,
      upstreamStatus: status,
      row,
      mappingVersion: STATUS_MAPPING_VERSION,
      qcBypass: null,
    });
  });
  if (options.documents) {
    await dataSource.transaction(async (manager) => {
      const stored = await storeDocuments(manager, order.id, status, options.documents!);
      await events.documentsStored(manager, {
        order: order.snapshot,
        upstreamStatus: status,
        documents: stored,
      });
    });
  }
}

export async function endLocally(
  dataSource: DataSource,
  events: OutboxOrderEvents,
  order: SeededOrder,
  state: 'failed' | 'cancelled',
  reason: string,
): Promise<void> {
  await dataSource.transaction(async (manager) => {
    await manager.query(`UPDATE orders SET state = $2 WHERE id = $1`, [
      order.id,
      localEndRow(state).orderState,
    ]);
    await events.endedLocally(manager, { order: order.snapshot, state, reason, alert: null });
  });
}
