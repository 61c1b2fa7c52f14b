import type { DataSource, EntityManager } from 'typeorm';
import { writeAuditEvents } from '../../persistence/audit-event.repository';
import { uuidv7 } from '../../common/uuid-v7';
import type { JobQueue } from '../../jobs/job-queue';
import type {
  AcceptedMessageInsert,
  InboundMessageRepository,
} from '../../persistence/inbound-message.repository';
import type { IntakeResponder } from '../../domain/ports/intake-responder';
import type { IntakeBatcher } from '../intake-batcher';
import { storableInput, storedEnvelope, withComposedInput } from './stored-envelope';
import type { IntakeInput, IntakeOutcome, IntakeReply, IntakeResponse } from '../intake.model';
import { intakeRows, tooLateEvent } from './intake-audit';
import { decide, type IntakePlan } from './intake-decision';
import type { IntakePlanner } from './intake-planner';
import type { OrderChanges } from './order-changes';
import type { RecordRejectedUseCase } from './record-rejected.use-case';

class RefusedByResponder extends Error {
  constructor(
    readonly response: IntakeResponse,
    readonly outcome: IntakeOutcome,
  ) {
    super('refused');
  }
}

/**
 * The one way an order enters the adapter, whatever its transport. One transaction stores
 * the raw message, the orders, the audit trail and the jobs that follow up; the caller
 * answers the sender only after it returns (acknowledge after commit). A resend (same
 * idempotency key) is answered with the stored answer and changes nothing.
 */
export class IngestOrderMessageUseCase {
  constructor(
    private readonly dataSource: DataSource,
    private readonly jobs: JobQueue,
    private readonly batcher: IntakeBatcher,
    private readonly messages: InboundMessageRepository,
    private readonly planner: IntakePlanner,
    private readonly changes: OrderChanges,
    private readonly rejected: RecordRejectedUseCase,
  ) {}

  private plan(manager: EntityManager, input: IntakeInput): Promise<IntakePlan> {
    return this.planner.plan(manager, input);
  }

  private applyChanges(...args: Parameters<OrderChanges['applyChanges']>): Promise<void> {
    return this.changes.applyChanges(...args);
  }

  private recordRejected(
    ...args: Parameters<RecordRejectedUseCase['recordRejected']>
  ): Promise<string> {
    return this.rejected.recordRejected(...args);
  }

  private rowsOf(...args: Parameters<typeof intakeRows>): ReturnType<typeof intakeRows> {
    return intakeRows(...args);
  }

  async ingest(
    unsafeInput: IntakeInput,
    responder: IntakeResponder<EntityManager>,
  ): Promise<IntakeReply> {
    // values derived from input must be storable as text/jsonb, indexed ones within the index;
    // identifiers in one form (NFC), whatever form the sender wrote (domain/identifier-form.ts)
    const input = withComposedInput(storableInput(unsafeInput));
    // The hot path of every front door (bench/mllp-ingest): a message that only creates
    // orders is stored by one function call (one round trip, one commit, shared with the
    // messages that arrive at the same time). Anything else, or
    // a placer number already known, takes the general path: BEGIN, lock-and-find, one
    // insert statement, the changes, COMMIT.
    if (isCreateOnly(input, responder)) {
      const reply = await this.ingestNew(input, responder);
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
        const response = responder.respond(plan.outcome);
        if (!response.accepted) {
          refused = new RefusedByResponder(response, plan.outcome);
        } else {
          const messageId = await this.insertAll(runner.manager, input, plan, response);
          if (messageId) {
            await this.applyChanges(runner.manager, input, messageId, plan);
            await responder.afterStore?.(runner.manager, {
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
    // A message whose key was already accepted is a resend (the stored answer) or a reused
    // control ID (refused as such) before anything the intake would decide about its orders
    // now: the orders may have moved on since the original was answered.
    if (refused && (await this.messages.findAccepted(input.idempotencyKey))) {
      return this.answerDuplicate(input, responder);
    }
    if (refused) {
      const problems = refused.outcome.results.flatMap((r) =>
        r.kind === 'unknown-order'
          ? [
              {
                location: r.sourceRef,
                code: 'unknown-order',
                message: `no order known for this ${r.action}`,
              },
            ]
          : r.kind === 'change-refused'
            ? [
                {
                  location: r.sourceRef,
                  code: r.reason,
                  message: `${r.action} of order ${r.orderId} refused (${r.reason})`,
                },
              ]
            : [],
      );
      // A cancel refused because the order has ended (FHIR revoke answered 409) stands on the
      // order's timeline as the HL7 cancel answered UC does, written in the refusal's own
      // transaction: it was written after that commit, so a crash between the two left the
      // refusal without its event.
      const late = refused.outcome.results.flatMap((r) =>
        r.kind === 'cancel-too-late'
          ? [
              tooLateEvent(
                {
                  kind: r.kind,
                  orderId: r.orderId,
                  state: r.state,
                  sourceRef: r.sourceRef,
                  cancelRequested: 'cancelRequested' in r && r.cancelRequested === true,
                },
                input.actor ?? input.sender,
              ),
            ]
          : [],
      );
      const id = await this.recordRejected(
        { ...input, response: refused.response, problems },
        (messageId) => late.map((e) => ({ ...e, inboundMessageId: messageId })),
      );
      return {
        duplicate: false,
        inboundMessageId: id,
        response: refused.response,
        outcome: refused.outcome,
      };
    }
    return this.answerDuplicate(input, responder);
  }

  /**
   * The fast path for a message of new orders only: the answer cannot depend on what the
   * database holds unless a placer number is already known, and then intake_accept_batch
   * writes nothing for it and this returns undefined (the general path decides per order).
   * Messages arriving together are committed together (IntakeBatcher).
   */
  private async ingestNew(
    input: IntakeInput,
    responder: IntakeResponder<EntityManager>,
  ): Promise<IntakeReply | undefined> {
    const steps = input.orders.map((order) => decide(order, undefined, undefined));
    const outcome: IntakeOutcome = { results: steps.map((s) => s.result), patientOrdersUpdated: 0 };
    const response = responder.respond(outcome);
    if (!response.accepted) return undefined;
    const plan: IntakePlan = { steps, outcome, patientOrders: [] };
    const rows = this.rowsOf(input, plan, response);
    const messageId = uuidv7();
    const placers = input.orders
      .map((o) => o.request.placerOrderNumber?.value)
      .filter((v): v is string => Boolean(v));
    const answer = await this.batcher.submit({
      ...storedMessage(messageId, input, response, rows),
      placers,
    });
    if (answer === 'duplicate') return this.answerDuplicate(input, responder);
    if (answer !== 'accepted') return undefined;
    if (hasJobs(outcome, input)) this.jobs.kick();
    return { duplicate: false, inboundMessageId: messageId, response, outcome };
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
    return this.messages.insertAccepted(storedMessage(uuidv7(), input, response, rows), manager);
  }

  private async answerDuplicate(
    input: IntakeInput,
    responder: IntakeResponder<EntityManager>,
  ): Promise<IntakeReply> {
    const reused = await this.refuseReusedKey(input, responder);
    if (reused) return reused;
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
          ...storedEnvelope(input, response),
          idempotencyKey: input.idempotencyKey,
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

  /**
   * The key is taken, but the front door may find this is not a resend of the message stored
   * under it (a sender reusing MSH-10 for another message): refused and kept, never answered
   * with the other message's answer (that would report a cancel as done that was never read).
   */
  private async refuseReusedKey(
    input: IntakeInput,
    responder: IntakeResponder<EntityManager>,
  ): Promise<IntakeReply | undefined> {
    if (!responder.reusedKey) return undefined;
    const first = await this.messages.findAccepted(input.idempotencyKey);
    const placers = input.orders.flatMap((o) =>
      o.request.placerOrderNumber?.value ? [o.request.placerOrderNumber.value] : [],
    );
    const refusal = first
      ? await responder.reusedKey(first.raw, {
          patients: () => this.messages.patientsUnderPlacers(input.sender, placers),
          answer: first.response ?? Buffer.alloc(0),
        })
      : undefined;
    if (!first || !refusal) return undefined;
    const id = await this.recordRejected({
      ...input,
      response: refusal,
      problems: [
        {
          location: 'idempotency key',
          code: 'reused-key',
          message: `the key of accepted message ${first.id} was reused for different content`,
        },
      ],
    });
    return { duplicate: false, inboundMessageId: id, response: refusal };
  }
}

/** New orders only, nothing that reads or changes what is stored: the fast path's case. */
function isCreateOnly(input: IntakeInput, responder: IntakeResponder<EntityManager>): boolean {
  if (input.orders.length === 0 || responder.afterStore || (input.patientEvents?.length ?? 0) > 0)
    return false;
  const placers = new Set<string>();
  for (const order of input.orders) {
    if (order.request.action !== 'create') return false;
    // An order that replaces another changes that one (intake-planner: planReplaces).
    if (order.replaces?.length) return false;
    const placer = order.request.placerOrderNumber?.value;
    if (placer) {
      if (placers.has(placer)) return false; // the same order twice in one message
      placers.add(placer);
    } else if (order.request.fillerOrderNumber?.value) {
      // Known by its filler number (intake-planner): only the general path looks that up.
      return false;
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

/** The inbound_messages row of an accepted message, with its orders, audit events and jobs. */
function storedMessage(
  id: string,
  input: IntakeInput,
  response: IntakeResponse,
  rows: { orders: string; audit: string; jobs: string },
): AcceptedMessageInsert {
  return {
    ...storedEnvelope(input, response),
    id,
    idempotencyKey: input.idempotencyKey,
    orders: rows.orders,
    mappingVersion: input.mappingVersion,
    audit: rows.audit,
    jobs: rows.jobs,
  };
}
