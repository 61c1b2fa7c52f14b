import type { DataSource, EntityManager } from 'typeorm';
import type { AuditEventInput } from '../audit/audit-writer';
import { writeAuditEvents } from '../audit/audit-writer';
import type { JobQueue } from '../jobs/job-queue';
import type { InboundTransport } from '../persistence/entities/inbound-message.entity';
import type {
  Identifier,
  MappedField,
  OrderRequest,
  PatientInfo,
  ToleratedQuirk,
} from './domain/order-request';
import { isOrderState, isTerminal, type OrderState } from './domain/order-state';

/**
 * The one way an order enters the adapter, whatever its transport. One transaction stores
 * the raw message, the orders, the audit trail and the jobs that follow up; the caller
 * answers the sender only after it returns (acknowledge after commit). A resend (same
 * idempotency key) is answered with the stored answer and changes nothing.
 */

export const ORDER_JOBS = {
  place: 'order.place-upstream',
  cancel: 'order.cancel-upstream',
  updateMetadata: 'order.update-metadata',
} as const;

export interface IntakeOrder {
  request: OrderRequest;
  lineage: MappedField[];
  /** Where in the message the order came from, e.g. `ORC/OBR group 2` or `Bundle.entry[0]`. */
  sourceRef: string;
}

export type IntakePatientEvent =
  | { kind: 'patient-update'; patient: PatientInfo; lineage: MappedField[] }
  | {
      kind: 'patient-merge';
      patient: PatientInfo;
      priorIdentifiers: Identifier[];
      lineage: MappedField[];
    };

export interface IntakeInput {
  transport: InboundTransport;
  sender: string | null;
  remoteAddress: string | null;
  messageType: string | null;
  messageControlId: string | null;
  idempotencyKey: string;
  raw: Buffer;
  contentType: string;
  quirks: ToleratedQuirk[];
  mappingVersion: string;
  orders: IntakeOrder[];
  patientEvents?: IntakePatientEvent[];
  actor?: string;
}

export type IntakeOrderResult =
  | { kind: 'created'; orderId: string; sourceRef: string }
  | { kind: 'already-known'; orderId: string; sourceRef: string }
  | { kind: 'cancel-accepted'; orderId: string; sourceRef: string }
  | { kind: 'cancel-too-late'; orderId: string; state: OrderState; sourceRef: string }
  | { kind: 'updated'; orderId: string; sourceRef: string }
  | { kind: 'status-recorded'; orderId: string | null; sourceRef: string }
  | { kind: 'unknown-order'; action: string; sourceRef: string };

export interface IntakeOutcome {
  results: IntakeOrderResult[];
  patientOrdersUpdated: number;
}

export interface IntakeResponse {
  /** `AA`, `AE`, `CA`, `201`… what the answer says, for the audit log and search. */
  code: string;
  body: Buffer;
  contentType: string;
  /** false: the answer refuses the message; nothing of it is applied and it is stored as rejected. */
  accepted: boolean;
  error?: Record<string, unknown>;
}

export interface IntakeReply {
  duplicate: boolean;
  inboundMessageId: string;
  response: IntakeResponse;
  outcome?: IntakeOutcome;
}

export interface RejectionInput {
  transport: InboundTransport;
  sender: string | null;
  remoteAddress: string | null;
  messageType: string | null;
  messageControlId: string | null;
  raw: Buffer;
  contentType: string;
  quirks: ToleratedQuirk[];
  response: IntakeResponse;
  /** What was wrong, for the analyst (PHI-free). */
  problems: Array<{ location?: string; code: string; message: string }>;
}

class RefusedByResponder extends Error {
  constructor(
    readonly response: IntakeResponse,
    readonly outcome: IntakeOutcome,
  ) {
    super('refused');
  }
}

interface OrderRow {
  id: string;
  state: string;
  upstream_order_id: string | null;
  request: OrderRequest;
}

export class OrderIntakeService {
  constructor(
    private readonly dataSource: DataSource,
    private readonly jobs: JobQueue,
  ) {}

  async ingest(
    input: IntakeInput,
    respond: (outcome: IntakeOutcome) => IntakeResponse,
  ): Promise<IntakeReply> {
    let refused: RefusedByResponder | undefined;
    let reply: IntakeReply | undefined;
    try {
      reply = await this.dataSource.transaction(async (manager) => {
        const inserted: Array<{ id: string }> = await manager.query(
          `INSERT INTO inbound_messages
             (transport, sender, remote_address, message_type, message_control_id, idempotency_key,
              content_type, raw, outcome, quirks)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'accepted', $9::jsonb)
           ON CONFLICT (idempotency_key) WHERE outcome = 'accepted' DO NOTHING
           RETURNING id`,
          [
            input.transport,
            input.sender,
            input.remoteAddress,
            input.messageType,
            input.messageControlId,
            input.idempotencyKey,
            input.contentType,
            input.raw,
            JSON.stringify(input.quirks),
          ],
        );
        if (inserted.length === 0) return undefined; // a resend: answered below, outside this transaction
        const messageId = inserted[0]!.id;
        const audit: AuditEventInput[] = [
          {
            kind: 'inbound.received',
            inboundMessageId: messageId,
            actor: input.actor ?? input.sender,
            summary: `${input.messageType ?? input.transport} received from ${input.sender ?? 'unknown sender'}`,
            detail: {
              transport: input.transport,
              messageControlId: input.messageControlId,
              bytes: input.raw.length,
              orders: input.orders.length,
            },
          },
        ];
        if (input.quirks.length > 0) {
          audit.push({
            kind: 'inbound.quirks',
            inboundMessageId: messageId,
            severity: 'warning',
            summary: `tolerated: ${input.quirks.map((q) => q.code).join(', ')}`,
            detail: { quirks: input.quirks },
          });
        }
        const results: IntakeOrderResult[] = [];
        for (const order of input.orders) {
          results.push(await this.applyOrder(manager, input, messageId, order, audit));
        }
        let patientOrdersUpdated = 0;
        for (const event of input.patientEvents ?? []) {
          patientOrdersUpdated += await this.applyPatientEvent(
            manager,
            input,
            messageId,
            event,
            audit,
          );
        }
        const outcome: IntakeOutcome = { results, patientOrdersUpdated };
        const response = respond(outcome);
        if (!response.accepted) throw new RefusedByResponder(response, outcome);
        await manager.query(
          `UPDATE inbound_messages SET response = $2, response_code = $3, response_content_type = $4 WHERE id = $1`,
          [messageId, response.body, response.code, response.contentType],
        );
        await writeAuditEvents(manager, audit);
        return { duplicate: false, inboundMessageId: messageId, response, outcome };
      });
    } catch (error) {
      if (!(error instanceof RefusedByResponder)) throw error;
      refused = error;
    }
    if (refused) {
      const problems = refused.outcome.results
        .filter((r) => r.kind === 'unknown-order')
        .map((r) => ({
          location: r.sourceRef,
          code: 'unknown-order',
          message: `no order known for this ${r.kind === 'unknown-order' ? r.action : ''}`,
        }));
      const id = await this.recordRejected({ ...input, response: refused.response, problems });
      return {
        duplicate: false,
        inboundMessageId: id,
        response: refused.response,
        outcome: refused.outcome,
      };
    }
    return reply ?? this.answerDuplicate(input);
  }

  /** Stores a refused message (raw bytes, the answer, why) and audits it. Returns its id. */
  async recordRejected(input: RejectionInput): Promise<string> {
    return this.dataSource.transaction(async (manager) => {
      const rows: Array<{ id: string }> = await manager.query(
        `INSERT INTO inbound_messages
           (transport, sender, remote_address, message_type, message_control_id, content_type, raw,
            outcome, response_code, response, response_content_type, error, quirks)
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'rejected', $8, $9, $10, $11::jsonb, $12::jsonb)
         RETURNING id`,
        [
          input.transport,
          input.sender,
          input.remoteAddress,
          input.messageType,
          input.messageControlId,
          input.contentType,
          input.raw,
          input.response.code,
          input.response.body,
          input.response.contentType,
          JSON.stringify({ problems: input.problems, ...(input.response.error ?? {}) }),
          JSON.stringify(input.quirks),
        ],
      );
      const id = rows[0]!.id;
      await writeAuditEvents(manager, [
        {
          kind: 'inbound.rejected',
          inboundMessageId: id,
          severity: 'error',
          actor: input.sender,
          summary: `${input.messageType ?? input.transport} refused with ${input.response.code}: ${input.problems
            .map((p) => p.message)
            .slice(0, 3)
            .join('; ')}`,
          detail: {
            problems: input.problems,
            responseCode: input.response.code,
            bytes: input.raw.length,
          },
        },
      ]);
      return id;
    });
  }

  private async answerDuplicate(input: IntakeInput): Promise<IntakeReply> {
    return this.dataSource.transaction(async (manager) => {
      const original: Array<{
        id: string;
        response: Buffer | null;
        response_code: string | null;
        response_content_type: string | null;
      }> = await manager.query(
        `SELECT id, response, response_code, response_content_type FROM inbound_messages
            WHERE idempotency_key = $1 AND outcome = 'accepted'`,
        [input.idempotencyKey],
      );
      const first = original[0];
      if (!first) throw new Error('duplicate detected but the original message is gone');
      const response: IntakeResponse = {
        code: first.response_code ?? '',
        body: first.response ?? Buffer.alloc(0),
        contentType: first.response_content_type ?? input.contentType,
        accepted: true,
      };
      const rows: Array<{ id: string }> = await manager.query(
        `INSERT INTO inbound_messages
           (transport, sender, remote_address, message_type, message_control_id, idempotency_key,
            content_type, raw, outcome, response_code, response, response_content_type, quirks)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'duplicate', $9, $10, $11, $12::jsonb)
         RETURNING id`,
        [
          input.transport,
          input.sender,
          input.remoteAddress,
          input.messageType,
          input.messageControlId,
          input.idempotencyKey,
          input.contentType,
          input.raw,
          response.code,
          response.body,
          response.contentType,
          JSON.stringify(input.quirks),
        ],
      );
      await writeAuditEvents(manager, [
        {
          kind: 'inbound.duplicate',
          inboundMessageId: rows[0]!.id,
          actor: input.sender,
          summary: `resend of ${input.messageControlId ?? 'a message'} answered with the original ${response.code}`,
          detail: { originalMessageId: first.id },
        },
      ]);
      return { duplicate: true, inboundMessageId: rows[0]!.id, response };
    });
  }

  private async applyOrder(
    manager: EntityManager,
    input: IntakeInput,
    messageId: string,
    order: IntakeOrder,
    audit: AuditEventInput[],
  ): Promise<IntakeOrderResult> {
    const req = order.request;
    const existing = await this.findExisting(manager, input, req);
    const actor = input.actor ?? input.sender;
    switch (req.action) {
      case 'create': {
        if (existing && existing.state !== 'cancelled') {
          audit.push({
            kind: 'order.duplicate',
            orderId: existing.id,
            inboundMessageId: messageId,
            severity: 'warning',
            actor,
            summary: `new order for placer number already known (state ${existing.state}): not created again`,
            detail: { sourceRef: order.sourceRef },
          });
          return { kind: 'already-known', orderId: existing.id, sourceRef: order.sourceRef };
        }
        const rows: Array<{ id: string }> = await manager.query(
          `INSERT INTO orders
             (source, sender, inbound_message_id, state, accession_number, patient_id, placer_order_number,
              filler_order_number, placer_group_number, study_instance_uid, request, mapping_version)
           VALUES ($1, $2, $3, 'received', $4, $5, $6, $7, $8, $9, $10::jsonb, $11)
           RETURNING id`,
          [
            req.source,
            input.sender,
            messageId,
            req.accessionNumber ?? null,
            primaryPatientId(req.patient),
            req.placerOrderNumber?.value ?? null,
            req.fillerOrderNumber?.value ?? null,
            req.placerGroupNumber?.value ?? null,
            req.studyInstanceUid ?? null,
            JSON.stringify(req),
            input.mappingVersion,
          ],
        );
        const orderId = rows[0]!.id;
        audit.push(
          {
            kind: 'order.created',
            orderId,
            inboundMessageId: messageId,
            actor,
            summary: `order created from ${order.sourceRef}`,
            detail: { sourceRef: order.sourceRef, products: req.products, state: 'received' },
          },
          {
            kind: 'mapping.applied',
            orderId,
            inboundMessageId: messageId,
            summary: `${order.lineage.length} fields mapped by ${input.mappingVersion}`,
            detail: { mappingVersion: input.mappingVersion, lineage: order.lineage },
          },
        );
        await this.jobs.enqueue(
          ORDER_JOBS.place,
          { orderId },
          { manager, jobKey: `place:${orderId}` },
        );
        return { kind: 'created', orderId, sourceRef: order.sourceRef };
      }
      case 'cancel': {
        if (!existing)
          return { kind: 'unknown-order', action: 'cancel', sourceRef: order.sourceRef };
        const state = isOrderState(existing.state) ? existing.state : 'received';
        if (isTerminal(state)) {
          audit.push({
            kind: 'order.cancel-refused',
            orderId: existing.id,
            inboundMessageId: messageId,
            actor,
            severity: 'warning',
            summary: `cancel refused: the order is already ${state}`,
            detail: { sourceRef: order.sourceRef, state },
          });
          return {
            kind: 'cancel-too-late',
            orderId: existing.id,
            state,
            sourceRef: order.sourceRef,
          };
        }
        await manager.query(
          `UPDATE orders SET cancel_requested_at = now(), cancel_reason = $2, updated_at = now(), version = version + 1
            WHERE id = $1 AND cancel_requested_at IS NULL`,
          [
            existing.id,
            `${input.messageType ?? input.transport} from ${input.sender ?? 'unknown'}`,
          ],
        );
        audit.push({
          kind: 'order.cancel-requested',
          orderId: existing.id,
          inboundMessageId: messageId,
          actor,
          summary: `cancel requested by ${actor ?? 'the orderer'}`,
          detail: { sourceRef: order.sourceRef, stateAtRequest: state },
        });
        await this.jobs.enqueue(
          ORDER_JOBS.cancel,
          { orderId: existing.id },
          { manager, jobKey: `cancel:${existing.id}` },
        );
        return { kind: 'cancel-accepted', orderId: existing.id, sourceRef: order.sourceRef };
      }
      case 'update': {
        if (!existing)
          return { kind: 'unknown-order', action: 'change', sourceRef: order.sourceRef };
        const merged: OrderRequest = {
          ...existing.request,
          ...stripUndefined(req),
          action: existing.request.action,
        };
        await manager.query(
          `UPDATE orders SET request = $2::jsonb, accession_number = $3, study_instance_uid = $4, patient_id = $5,
                  updated_at = now(), version = version + 1 WHERE id = $1`,
          [
            existing.id,
            JSON.stringify(merged),
            merged.accessionNumber ?? null,
            merged.studyInstanceUid ?? null,
            primaryPatientId(merged.patient),
          ],
        );
        audit.push(
          {
            kind: 'order.updated',
            orderId: existing.id,
            inboundMessageId: messageId,
            actor,
            summary: `order changed by ${input.messageType ?? input.transport}`,
            detail: { sourceRef: order.sourceRef },
          },
          {
            kind: 'mapping.applied',
            orderId: existing.id,
            inboundMessageId: messageId,
            summary: `${order.lineage.length} fields mapped by ${input.mappingVersion}`,
            detail: { mappingVersion: input.mappingVersion, lineage: order.lineage },
          },
        );
        await this.jobs.enqueue(
          ORDER_JOBS.updateMetadata,
          { orderId: existing.id },
          { manager, jobKey: `metadata:${existing.id}` },
        );
        return { kind: 'updated', orderId: existing.id, sourceRef: order.sourceRef };
      }
      case 'status': {
        audit.push({
          kind: 'order.status-recorded',
          orderId: existing?.id ?? null,
          inboundMessageId: messageId,
          actor,
          summary: `status message recorded${existing ? '' : ' (no matching order)'}`,
          detail: { sourceRef: order.sourceRef },
        });
        return {
          kind: 'status-recorded',
          orderId: existing?.id ?? null,
          sourceRef: order.sourceRef,
        };
      }
      default:
        return req.action satisfies never;
    }
  }

  /** The order an inbound cancel/change/new-order refers to: same sender's placer number, else filler number. */
  private async findExisting(
    manager: EntityManager,
    input: IntakeInput,
    req: OrderRequest,
  ): Promise<OrderRow | undefined> {
    if (req.placerOrderNumber?.value) {
      const rows: OrderRow[] = await manager.query(
        `SELECT id, state, upstream_order_id, request FROM orders
          WHERE sender IS NOT DISTINCT FROM $1 AND placer_order_number = $2
          ORDER BY created_at DESC LIMIT 1 FOR UPDATE`,
        [input.sender, req.placerOrderNumber.value],
      );
      if (rows[0]) return rows[0];
    }
    if (req.fillerOrderNumber?.value && req.action !== 'create') {
      const rows: OrderRow[] = await manager.query(
        `SELECT id, state, upstream_order_id, request FROM orders
          WHERE filler_order_number = $1 OR id::text = $1
          ORDER BY created_at DESC LIMIT 1 FOR UPDATE`,
        [req.fillerOrderNumber.value],
      );
      if (rows[0]) return rows[0];
    }
    return undefined;
  }

  private async applyPatientEvent(
    manager: EntityManager,
    input: IntakeInput,
    messageId: string,
    event: IntakePatientEvent,
    audit: AuditEventInput[],
  ): Promise<number> {
    const ids =
      event.kind === 'patient-merge'
        ? event.priorIdentifiers.map((i) => i.value)
        : event.patient.identifiers.map((i) => i.value);
    if (ids.length === 0) return 0;
    const open: OrderRow[] = await manager.query(
      `SELECT id, state, upstream_order_id, request FROM orders
        WHERE patient_id = ANY($1::text[]) AND state NOT IN ('delivered', 'failed', 'cancelled')
        FOR UPDATE`,
      [ids],
    );
    for (const row of open) {
      const patient: PatientInfo =
        event.kind === 'patient-merge'
          ? { ...row.request.patient, ...stripUndefined(event.patient) }
          : {
              ...row.request.patient,
              ...stripUndefined(event.patient),
              identifiers: row.request.patient.identifiers,
            };
      const request: OrderRequest = { ...row.request, patient };
      await manager.query(
        `UPDATE orders SET request = $2::jsonb, patient_id = $3, updated_at = now(), version = version + 1 WHERE id = $1`,
        [row.id, JSON.stringify(request), primaryPatientId(patient)],
      );
      audit.push(
        {
          kind: 'order.updated',
          orderId: row.id,
          inboundMessageId: messageId,
          actor: input.sender,
          summary:
            event.kind === 'patient-merge'
              ? 'patient merged (ADT^A40): order moved to the surviving patient'
              : 'demographics updated (ADT^A08)',
          detail: { event: event.kind },
        },
        {
          kind: 'mapping.applied',
          orderId: row.id,
          inboundMessageId: messageId,
          summary: `${event.lineage.length} fields mapped by ${input.mappingVersion}`,
          detail: { mappingVersion: input.mappingVersion, lineage: event.lineage },
        },
      );
      await this.jobs.enqueue(
        ORDER_JOBS.updateMetadata,
        { orderId: row.id },
        { manager, jobKey: `metadata:${row.id}` },
      );
    }
    return open.length;
  }
}

/** The identifier our indexes use: the medical record number (type MR) if there is one, else the first. */
export function primaryPatientId(patient: PatientInfo | undefined): string | null {
  if (!patient || patient.identifiers.length === 0) return null;
  return (patient.identifiers.find((i) => i.type === 'MR') ?? patient.identifiers[0]!).value;
}

function stripUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
