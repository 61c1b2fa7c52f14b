import type { DataSource, EntityManager } from 'typeorm';
import type { AuditEventInput } from '../audit/audit-writer';
import { writeAuditEvents } from '../audit/audit-writer';
import { pgSafeDeep } from '../common/pg-safe';
import { uuidv7 } from '../common/uuid-v7';
import type { JobQueue } from '../jobs/job-queue';
import { IntakeBatcher, type IntakeBatcherOptions } from './intake-batcher';
import type { InboundTransport } from '../persistence/entities/inbound-message.entity';
import { InboundMessageRepository } from '../persistence/inbound-message.repository';
import { OrderRepository, type IntakeOrderRow } from '../persistence/order.repository';
import type {
  Identifier,
  MappedField,
  OrderRequest,
  PatientInfo,
  ToleratedQuirk,
} from '../domain/order-request';
import { isOrderState, isTerminal, type OrderState } from '../domain/order-state';

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
  /**
   * The order this message names explicitly (FHIR `PUT /ServiceRequest/{id}`), used when the
   * sender's placer number does not find it.
   */
  targetOrderId?: string;
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
  /**
   * Runs inside the intake transaction after everything is written (only when the message is
   * accepted and new): front doors store what they serve alongside the order, e.g. the FHIR
   * resource with its version.
   */
  afterStore?: (
    manager: EntityManager,
    stored: { inboundMessageId: string; outcome: IntakeOutcome },
  ) => Promise<void>;
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

type OrderRow = IntakeOrderRow;

export class OrderIntakeService {
  private readonly batcher: IntakeBatcher;
  private readonly orders: OrderRepository;
  private readonly messages: InboundMessageRepository;

  constructor(
    private readonly dataSource: DataSource,
    private readonly jobs: JobQueue,
    options: IntakeBatcherOptions = {},
  ) {
    this.batcher = new IntakeBatcher(dataSource, options);
    this.orders = new OrderRepository(dataSource);
    this.messages = new InboundMessageRepository(dataSource);
  }

  async ingest(
    unsafeInput: IntakeInput,
    respond: (outcome: IntakeOutcome) => IntakeResponse,
  ): Promise<IntakeReply> {
    // values derived from input must be storable as text/jsonb (no NUL); raw bytes stay exact
    const input = pgSafeDeep(unsafeInput);
    // The hot path of every front door (bench/mllp-ingest): a message that only creates
    // orders is stored by one function call (one round trip, one commit, shared with the
    // messages that arrive at the same time). Anything else, or
    // a placer number already known, takes the general path: BEGIN, lock-and-find, one
    // insert statement, the changes, COMMIT.
    if (isCreateOnly(input)) {
      const reply = await this.ingestNew(input, respond);
      if (reply) return reply;
    }
    const runner = this.dataSource.createQueryRunner();
    await runner.connect();
    let refused: RefusedByResponder | undefined;
    let reply: IntakeReply | undefined;
    try {
      await runner.startTransaction();
      try {
        const plan = await this.plan(runner.manager, input);
        const response = respond(plan.outcome);
        if (!response.accepted) {
          refused = new RefusedByResponder(response, plan.outcome);
        } else {
          const messageId = await this.insertAll(runner.manager, input, plan, response);
          if (messageId) {
            await this.applyChanges(runner.manager, input, messageId, plan);
            await input.afterStore?.(runner.manager, {
              inboundMessageId: messageId,
              outcome: plan.outcome,
            });
            reply = {
              duplicate: false,
              inboundMessageId: messageId,
              response,
              outcome: plan.outcome,
            };
          }
        }
        if (reply) await runner.commitTransaction();
        else await runner.rollbackTransaction();
      } catch (error) {
        if (runner.isTransactionActive) await runner.rollbackTransaction().catch(() => undefined);
        throw error;
      }
    } finally {
      await runner.release();
    }
    if (reply) {
      if (hasJobs(reply.outcome, input)) this.jobs.kick();
      return reply;
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
    return this.answerDuplicate(input);
  }

  /**
   * The fast path for a message of new orders only: the answer cannot depend on what the
   * database holds unless a placer number is already known, and then intake_accept_batch
   * writes nothing for it and this returns undefined (the general path decides per order).
   * Messages arriving together are committed together (IntakeBatcher).
   */
  private async ingestNew(
    input: IntakeInput,
    respond: (outcome: IntakeOutcome) => IntakeResponse,
  ): Promise<IntakeReply | undefined> {
    const steps = input.orders.map((order) => decide(order, undefined, undefined));
    const outcome: IntakeOutcome = { results: steps.map((s) => s.result), patientOrdersUpdated: 0 };
    const response = respond(outcome);
    if (!response.accepted) return undefined;
    const plan: IntakePlan = { steps, outcome, patientOrders: [] };
    const rows = this.rowsOf(input, plan, response);
    const messageId = uuidv7();
    const placers = input.orders
      .map((o) => o.request.placerOrderNumber?.value)
      .filter((v): v is string => Boolean(v));
    const answer = await this.batcher.submit({
      id: messageId,
      sender: input.sender,
      placers,
      transport: input.transport,
      remoteAddress: input.remoteAddress,
      messageType: input.messageType,
      messageControlId: input.messageControlId,
      idempotencyKey: input.idempotencyKey,
      contentType: input.contentType,
      raw: input.raw,
      quirks: JSON.stringify(input.quirks),
      response: response.body,
      responseCode: response.code,
      responseContentType: response.contentType,
      orders: rows.orders,
      mappingVersion: input.mappingVersion,
      audit: rows.audit,
      jobs: rows.jobs,
    });
    if (answer === 'duplicate') return this.answerDuplicate(input);
    if (answer !== 'accepted') return undefined;
    if (hasJobs(outcome, input)) this.jobs.kick();
    return { duplicate: false, inboundMessageId: messageId, response, outcome };
  }

  /** Reads (and locks) the orders the message refers to and decides what each group does. */
  private async plan(manager: EntityManager, input: IntakeInput): Promise<IntakePlan> {
    const placers = [
      ...new Set(
        input.orders
          .map((o) => o.request.placerOrderNumber?.value)
          .filter((v): v is string => Boolean(v)),
      ),
    ];
    const byPlacer = new Map<string, OrderRow>();
    if (placers.length > 0) {
      const rows = await this.orders.lockAndFindByPlacers(input.sender, placers, manager);
      for (const row of rows)
        if (!byPlacer.has(row.placer_order_number)) byPlacer.set(row.placer_order_number, row);
    }
    const steps: PlannedStep[] = [];
    const results: IntakeOrderResult[] = [];
    const createdPlacers = new Map<string, string>();
    for (const order of input.orders) {
      const req = order.request;
      const placer = req.placerOrderNumber?.value;
      let existing = placer ? byPlacer.get(placer) : undefined;
      if (!existing && req.action !== 'create' && req.fillerOrderNumber?.value) {
        existing = await this.findByFiller(manager, req.fillerOrderNumber.value);
      }
      if (!existing && req.action !== 'create' && order.targetOrderId) {
        existing = await this.findByFiller(manager, order.targetOrderId);
      }
      const step = decide(order, existing, placer ? createdPlacers.get(placer) : undefined);
      if (step.kind === 'create' && placer) createdPlacers.set(placer, step.orderId);
      steps.push(step);
      results.push(step.result);
    }
    let patientOrders: OrderRow[] = [];
    for (const event of input.patientEvents ?? []) {
      patientOrders = patientOrders.concat(await this.findOpenOrdersOfPatient(manager, event));
    }
    return {
      steps,
      outcome: { results, patientOrdersUpdated: patientOrders.length },
      patientOrders,
    };
  }

  /**
   * One statement: the message (with its answer), the new orders, their audit events and
   * jobs. Nothing is written when the idempotency key was already accepted (a resend racing
   * the original): then it returns undefined.
   */
  private async insertAll(
    manager: EntityManager,
    input: IntakeInput,
    plan: IntakePlan,
    response: IntakeResponse,
  ): Promise<string | undefined> {
    const rows = this.rowsOf(input, plan, response);
    return this.messages.insertAccepted(
      {
        transport: input.transport,
        sender: input.sender,
        remoteAddress: input.remoteAddress,
        messageType: input.messageType,
        messageControlId: input.messageControlId,
        idempotencyKey: input.idempotencyKey,
        contentType: input.contentType,
        raw: input.raw,
        quirks: JSON.stringify(input.quirks),
        response: response.body,
        responseCode: response.code,
        responseContentType: response.contentType,
        orders: rows.orders,
        mappingVersion: input.mappingVersion,
        audit: rows.audit,
        jobs: rows.jobs,
        id: uuidv7(),
      },
      manager,
    );
  }

  /** The new orders, audit events and jobs of a plan, as JSON arrays for one statement. */
  private rowsOf(
    input: IntakeInput,
    plan: IntakePlan,
    response: IntakeResponse,
  ): { orders: string; audit: string; jobs: string } {
    const actor = input.actor ?? input.sender;
    const creates = plan.steps.filter((s): s is CreateStep => s.kind === 'create');
    const orders = creates.map((c) => {
      const req = c.order.request;
      return {
        id: c.orderId,
        source: req.source,
        accession_number: req.accessionNumber ?? null,
        patient_id: primaryPatientId(req.patient),
        placer_order_number: req.placerOrderNumber?.value ?? null,
        filler_order_number: req.fillerOrderNumber?.value ?? null,
        placer_group_number: req.placerGroupNumber?.value ?? null,
        study_instance_uid: req.studyInstanceUid ?? null,
        request: req,
      };
    });
    const audit: AuditEventInput[] = [
      {
        kind: 'inbound.received',
        actor,
        summary: `${input.messageType ?? input.transport} received from ${input.sender ?? 'unknown sender'}`,
        detail: {
          transport: input.transport,
          messageControlId: input.messageControlId,
          bytes: input.raw.length,
          orders: input.orders.length,
          answer: response.code,
        },
      },
    ];
    if (input.quirks.length > 0) {
      audit.push({
        kind: 'inbound.quirks',
        severity: 'warning',
        summary: `tolerated: ${input.quirks.map((q) => q.code).join(', ')}`,
        detail: { quirks: input.quirks },
      });
    }
    for (const step of plan.steps) {
      switch (step.kind) {
        case 'create':
          audit.push(
            {
              kind: 'order.created',
              orderId: step.orderId,
              actor,
              summary: `order created from ${step.order.sourceRef}`,
              detail: {
                sourceRef: step.order.sourceRef,
                products: step.order.request.products,
                state: 'received',
              },
            },
            mappingEvent(step.orderId, input.mappingVersion, step.order.lineage),
          );
          break;
        case 'duplicate-create':
          audit.push({
            kind: 'order.duplicate',
            orderId: step.orderId,
            severity: 'warning',
            actor,
            summary: `new order for a placer number already known (state ${step.state}): not created again`,
            detail: { sourceRef: step.order.sourceRef },
          });
          break;
        case 'status':
          audit.push({
            kind: 'order.status-recorded',
            orderId: step.orderId,
            actor,
            summary: `status message recorded${step.orderId ? '' : ' (no matching order)'}`,
            detail: { sourceRef: step.order.sourceRef },
          });
          break;
        case 'cancel-too-late':
          audit.push({
            kind: 'order.cancel-refused',
            orderId: step.orderId,
            severity: 'warning',
            actor,
            summary: `cancel refused: the order is already ${step.state}`,
            detail: { sourceRef: step.order.sourceRef, state: step.state },
          });
          break;
        case 'cancel':
        case 'update':
        case 'unknown':
          break; // applied (and audited) by applyChanges, or refused
        default:
          step satisfies never;
      }
    }
    const jobs = creates.map((c) => ({
      task: ORDER_JOBS.place,
      payload: { orderId: c.orderId },
      job_key: `place:${c.orderId}`,
    }));
    return {
      orders: JSON.stringify(orders),
      audit: JSON.stringify(audit),
      jobs: JSON.stringify(jobs),
    };
  }

  /** The less frequent changes (cancel, change, demographics, merge), after the message row exists. */
  private async applyChanges(
    manager: EntityManager,
    input: IntakeInput,
    messageId: string,
    plan: IntakePlan,
  ): Promise<void> {
    const actor = input.actor ?? input.sender;
    const audit: AuditEventInput[] = [];
    for (const step of plan.steps) {
      if (step.kind === 'cancel') {
        await this.orders.requestCancelOnce(
          step.orderId,
          `${input.messageType ?? input.transport} from ${input.sender ?? 'unknown'}`,
          manager,
        );
        audit.push({
          kind: 'order.cancel-requested',
          orderId: step.orderId,
          inboundMessageId: messageId,
          actor,
          summary: `cancel requested by ${actor ?? 'the orderer'}`,
          detail: { sourceRef: step.order.sourceRef, stateAtRequest: step.state },
        });
        await this.jobs.enqueue(
          ORDER_JOBS.cancel,
          { orderId: step.orderId },
          { manager, jobKey: `cancel:${step.orderId}` },
        );
      } else if (step.kind === 'update') {
        const merged: OrderRequest = {
          ...step.existing.request,
          ...stripUndefined(step.order.request),
          action: step.existing.request.action,
        };
        await this.orders.updateRequest(
          step.orderId,
          merged,
          {
            accessionNumber: merged.accessionNumber ?? null,
            studyInstanceUid: merged.studyInstanceUid ?? null,
            patientId: primaryPatientId(merged.patient),
          },
          manager,
        );
        audit.push(
          {
            kind: 'order.updated',
            orderId: step.orderId,
            inboundMessageId: messageId,
            actor,
            summary: `order changed by ${input.messageType ?? input.transport}`,
            detail: { sourceRef: step.order.sourceRef },
          },
          {
            ...mappingEvent(step.orderId, input.mappingVersion, step.order.lineage),
            inboundMessageId: messageId,
          },
        );
        await this.jobs.enqueue(
          ORDER_JOBS.updateMetadata,
          { orderId: step.orderId },
          { manager, jobKey: `metadata:${step.orderId}` },
        );
      }
    }
    for (const event of input.patientEvents ?? []) {
      for (const row of plan.patientOrders) {
        const patient: PatientInfo =
          event.kind === 'patient-merge'
            ? { ...row.request.patient, ...stripUndefined(event.patient) }
            : {
                ...row.request.patient,
                ...stripUndefined(event.patient),
                identifiers: row.request.patient.identifiers,
              };
        const request: OrderRequest = { ...row.request, patient };
        await this.orders.updatePatient(row.id, request, primaryPatientId(patient), manager);
        audit.push(
          {
            kind: 'order.updated',
            orderId: row.id,
            inboundMessageId: messageId,
            actor,
            summary:
              event.kind === 'patient-merge'
                ? 'patient merged (ADT^A40): order moved to the surviving patient'
                : 'demographics updated (ADT^A08)',
            detail: { event: event.kind },
          },
          {
            ...mappingEvent(row.id, input.mappingVersion, event.lineage),
            inboundMessageId: messageId,
          },
        );
        await this.jobs.enqueue(
          ORDER_JOBS.updateMetadata,
          { orderId: row.id },
          { manager, jobKey: `metadata:${row.id}` },
        );
      }
    }
    await writeAuditEvents(manager, audit);
  }

  /** Stores a refused message (raw bytes, the answer, why) and audits it. Returns its id. */
  async recordRejected(unsafeInput: RejectionInput): Promise<string> {
    const input = pgSafeDeep(unsafeInput);
    return this.dataSource.transaction(async (manager) => {
      const id = await this.messages.insertRejected(
        {
          transport: input.transport,
          sender: input.sender,
          remoteAddress: input.remoteAddress,
          messageType: input.messageType,
          messageControlId: input.messageControlId,
          contentType: input.contentType,
          raw: input.raw,
          responseCode: input.response.code,
          response: input.response.body,
          responseContentType: input.response.contentType,
          error: JSON.stringify({ problems: input.problems, ...(input.response.error ?? {}) }),
          quirks: JSON.stringify(input.quirks),
        },
        manager,
      );
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
      const first = await this.messages.findAccepted(input.idempotencyKey, manager);
      if (!first) throw new Error('duplicate detected but the original message is gone');
      const response: IntakeResponse = {
        code: first.response_code ?? '',
        body: first.response ?? Buffer.alloc(0),
        contentType: first.response_content_type ?? input.contentType,
        accepted: true,
      };
      const id = await this.messages.insertDuplicate(
        {
          transport: input.transport,
          sender: input.sender,
          remoteAddress: input.remoteAddress,
          messageType: input.messageType,
          messageControlId: input.messageControlId,
          idempotencyKey: input.idempotencyKey,
          contentType: input.contentType,
          raw: input.raw,
          responseCode: response.code,
          response: response.body,
          responseContentType: response.contentType,
          quirks: JSON.stringify(input.quirks),
        },
        manager,
      );
      await writeAuditEvents(manager, [
        {
          kind: 'inbound.duplicate',
          inboundMessageId: id,
          actor: input.sender,
          summary: `resend of ${input.messageControlId ?? 'a message'} answered with the original ${response.code}`,
          detail: { originalMessageId: first.id },
        },
      ]);
      return { duplicate: true, inboundMessageId: id, response };
    });
  }

  private async findByFiller(
    manager: EntityManager,
    filler: string,
  ): Promise<OrderRow | undefined> {
    return this.orders.findByFillerForUpdate(filler, manager);
  }

  private async findOpenOrdersOfPatient(
    manager: EntityManager,
    event: IntakePatientEvent,
  ): Promise<OrderRow[]> {
    const ids =
      event.kind === 'patient-merge'
        ? event.priorIdentifiers.map((i) => i.value)
        : event.patient.identifiers.map((i) => i.value);
    if (ids.length === 0) return [];
    return this.orders.openOrdersOfPatientsForUpdate(ids, manager);
  }
}

type PlannedStep = ReturnType<typeof decide>;
type CreateStep = Extract<PlannedStep, { kind: 'create' }>;

interface IntakePlan {
  steps: PlannedStep[];
  outcome: IntakeOutcome;
  patientOrders: OrderRow[];
}

/** What one order group does, given the order it refers to (if any). Pure. */
function decide(
  order: IntakeOrder,
  existing: OrderRow | undefined,
  createdInThisMessage: string | undefined,
) {
  const req = order.request;
  const sourceRef = order.sourceRef;
  switch (req.action) {
    case 'create': {
      const known =
        createdInThisMessage ??
        (existing && existing.state !== 'cancelled' ? existing.id : undefined);
      if (known) {
        const state = existing?.id === known ? existing.state : 'received';
        return {
          kind: 'duplicate-create' as const,
          orderId: known,
          state,
          order,
          result: {
            kind: 'already-known' as const,
            orderId: known,
            sourceRef,
          } satisfies IntakeOrderResult,
        };
      }
      const orderId = uuidv7();
      return {
        kind: 'create' as const,
        orderId,
        order,
        result: { kind: 'created' as const, orderId, sourceRef } satisfies IntakeOrderResult,
      };
    }
    case 'cancel': {
      if (!existing) {
        return {
          kind: 'unknown' as const,
          order,
          result: {
            kind: 'unknown-order' as const,
            action: 'cancel',
            sourceRef,
          } satisfies IntakeOrderResult,
        };
      }
      const state: OrderState = isOrderState(existing.state) ? existing.state : 'received';
      if (isTerminal(state)) {
        return {
          kind: 'cancel-too-late' as const,
          orderId: existing.id,
          state,
          order,
          result: {
            kind: 'cancel-too-late' as const,
            orderId: existing.id,
            state,
            sourceRef,
          } satisfies IntakeOrderResult,
        };
      }
      return {
        kind: 'cancel' as const,
        orderId: existing.id,
        state,
        order,
        result: {
          kind: 'cancel-accepted' as const,
          orderId: existing.id,
          sourceRef,
        } satisfies IntakeOrderResult,
      };
    }
    case 'update': {
      if (!existing) {
        return {
          kind: 'unknown' as const,
          order,
          result: {
            kind: 'unknown-order' as const,
            action: 'change',
            sourceRef,
          } satisfies IntakeOrderResult,
        };
      }
      return {
        kind: 'update' as const,
        orderId: existing.id,
        existing,
        order,
        result: {
          kind: 'updated' as const,
          orderId: existing.id,
          sourceRef,
        } satisfies IntakeOrderResult,
      };
    }
    case 'status':
      return {
        kind: 'status' as const,
        orderId: existing?.id ?? null,
        order,
        result: {
          kind: 'status-recorded' as const,
          orderId: existing?.id ?? null,
          sourceRef,
        } satisfies IntakeOrderResult,
      };
    default:
      return req.action satisfies never;
  }
}

/**
 * Longest lineage value kept in the audit event. The full value is in the stored order and
 * the raw message; the lineage says which field became which, so a 10 MB free text is not
 * copied a third time into every message's audit (issue #15: memory per message in flight).
 */
export const LINEAGE_VALUE_MAX_CHARS = 1_000;

function mappingEvent(
  orderId: string,
  mappingVersion: string,
  lineage: MappedField[],
): AuditEventInput {
  return {
    kind: 'mapping.applied',
    orderId,
    summary: `${lineage.length} fields mapped by ${mappingVersion}`,
    detail: {
      mappingVersion,
      lineage: lineage.map((l) =>
        typeof l.value === 'string' && l.value.length > LINEAGE_VALUE_MAX_CHARS
          ? {
              ...l,
              value: `${l.value.slice(0, LINEAGE_VALUE_MAX_CHARS)}… (${l.value.length} characters in all)`,
            }
          : l,
      ),
    },
  };
}

/** New orders only, nothing that reads or changes what is stored: the fast path's case. */
function isCreateOnly(input: IntakeInput): boolean {
  if (input.orders.length === 0 || input.afterStore || (input.patientEvents?.length ?? 0) > 0)
    return false;
  const placers = new Set<string>();
  for (const order of input.orders) {
    if (order.request.action !== 'create') return false;
    const placer = order.request.placerOrderNumber?.value;
    if (placer) {
      if (placers.has(placer)) return false; // the same order twice in one message
      placers.add(placer);
    }
  }
  return true;
}

function hasJobs(outcome: IntakeOutcome | undefined, input: IntakeInput): boolean {
  if (!outcome) return false;
  return (
    outcome.patientOrdersUpdated > 0 ||
    outcome.results.some(
      (r) => r.kind === 'created' || r.kind === 'cancel-accepted' || r.kind === 'updated',
    ) ||
    (input.patientEvents?.length ?? 0) > 0
  );
}

/** The identifier our indexes use: the medical record number (type MR) if there is one, else the first. */
export function primaryPatientId(patient: PatientInfo | undefined): string | null {
  if (!patient || patient.identifiers.length === 0) return null;
  return (patient.identifiers.find((i) => i.type === 'MR') ?? patient.identifiers[0]!).value;
}

function stripUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
