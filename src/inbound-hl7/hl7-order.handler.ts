import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { sha256Hex } from '../common/hash';
import { dedupeQuirks } from '../common/quirks';
import { recordRefusal } from '../common/refusal';
import {
  buildAck,
  buildUnparseableAck,
  checkStructure,
  type Hl7ErrorDetail,
  type Hl7Message,
  type MllpMessageMeta,
  type OrderControlReply,
  type Hl7ParseLimits,
  parseHl7,
  salvageControlId,
  buildBatchAck,
  isHl7Batch,
  splitHl7Batch,
  type StructureCheckOptions,
} from '../hl7';
import {
  type Hl7OrderMappingConfig,
  DEFAULT_HL7_ORDER_MAPPING_CONFIG,
} from '../mappings/hl7-order.config';
import { mapHl7Message, type MappedOrder } from '../mappings/hl7-order.mapping';
import type {
  IntakeOutcome,
  IntakeResponse,
  OrderIntakeService,
  RejectionInput,
} from '../orders/order-intake.service';
import { ackLabel, messagesTotal, typeLabel } from './hl7-intake.metrics';

export interface Hl7OrderHandlerOptions {
  mapping?: Hl7OrderMappingConfig;
  structure?: StructureCheckOptions;
  /** Bounds on a message's shape (HL7_MAX_*); a message over them is refused AR. */
  limits?: Hl7ParseLimits;
  /** Messages in one batch (FHS/BHS), at most; a larger batch is refused whole. */
  maxBatchMessages?: number;
  /** MSH-3/MSH-4 of our ACKs when the inbound message cannot be parsed at all. */
  ourApplication?: string;
  ourFacility?: string;
  clock?: () => Date;
  controlIds?: () => string;
}

/**
 * The MLLP front door's only logic: parse, check, map, hand to the intake use case, and
 * answer. The answer is built inside the intake transaction and sent after it commits; a
 * failure to store is answered AR (never AA), so the sender keeps the message and resends.
 */
export class Hl7OrderHandler {
  private readonly clock: () => Date;
  private readonly controlIds: () => string;

  constructor(
    private readonly intake: OrderIntakeService,
    private readonly logger: Logger,
    private readonly options: Hl7OrderHandlerOptions = {},
  ) {
    this.clock = options.clock ?? (() => new Date());
    this.controlIds = options.controlIds ?? (() => randomUUID().replace(/-/g, '').slice(0, 20));
  }

  async handle(raw: Buffer, meta: MllpMessageMeta): Promise<Buffer> {
    if (isHl7Batch(raw)) return this.handleBatch(raw, meta);
    return this.handleMessage(raw, meta);
  }

  /**
   * A batch (FHS/BHS … BTS/FTS, v2.5.1 §2.10.3): every message inside is handled as if it had
   * come alone — stored durably, de-duplicated, acknowledged — in order, and the answer is one
   * batch acknowledgment holding each message's ACK, sent after the last one is stored.
   */
  private async handleBatch(raw: Buffer, meta: MllpMessageMeta): Promise<Buffer> {
    const maxMessages = this.options.maxBatchMessages ?? 1000;
    const split = splitHl7Batch(raw, maxMessages);
    if ('tooMany' in split) {
      return this.rejectUnparseable(
        raw,
        meta,
        `a batch of more than ${maxMessages} messages is not accepted; send smaller batches`,
      );
    }
    if (split.messages.length === 0) {
      return this.rejectUnparseable(raw, meta, 'the batch holds no message (no MSH)');
    }
    const acks: Buffer[] = [];
    for (const message of split.messages) acks.push(await this.handleMessage(message, meta));
    messagesTotal.inc({ type: 'batch', ack: 'batch' });
    return buildBatchAck({
      batch: split,
      acks,
      ourApplication: this.options.ourApplication ?? 'IMAGING-AI-ADAPTER',
      ourFacility: this.options.ourFacility ?? '',
      controlId: this.controlIds(),
      now: this.clock(),
    });
  }

  private async handleMessage(raw: Buffer, meta: MllpMessageMeta): Promise<Buffer> {
    let message: Hl7Message;
    try {
      message = parseHl7(raw, this.options.limits);
    } catch (error) {
      return this.rejectUnparseable(raw, meta, (error as Error).message);
    }
    const type = `${message.messageType.code}^${message.messageType.trigger}`;
    const sender = [message.msh.value(3), message.msh.value(4)].filter(Boolean).join('^') || null;
    const quirks = message.quirks.map((q) => ({ code: q.code, detail: q.detail }));
    const base = {
      transport: 'mllp' as const,
      sender,
      remoteAddress: meta.remoteAddress,
      messageType: type,
      messageControlId: message.controlId || null,
      raw,
      contentType: 'application/hl7-v2',
    };

    const structure = checkStructure(message, this.options.structure);
    if (structure.outcome !== 'accept') {
      return this.refuse(message, base, quirks, structure.outcome, structure.errors);
    }
    const mapped = mapHl7Message(message, this.options.mapping ?? DEFAULT_HL7_ORDER_MAPPING_CONFIG);
    const allQuirks = dedupeQuirks(mapped.quirks);
    if (mapped.outcome === 'error') {
      return this.refuse(message, base, allQuirks, 'error', mapped.errors);
    }
    const warnings: Hl7ErrorDetail[] = [...structure.errors, ...mapped.errors].filter(
      (e) => e.severity !== 'E',
    );
    const idempotencyKey = message.controlId
      ? `mllp|${sender ?? ''}|${message.controlId}`
      : `mllp|${sender ?? ''}|sha256:${sha256Hex(raw)}`;

    try {
      const reply = await this.intake.ingest(
        {
          ...base,
          idempotencyKey,
          quirks: allQuirks,
          mappingVersion: mapped.mappingVersion,
          orders: mapped.orders.map((o) => ({
            request: o.request,
            lineage: o.lineage,
            sourceRef: `ORC/OBR group ${o.groupIndex}`,
          })),
          patientEvents: mapped.patientEvents,
        },
        { respond: (outcome) => this.respond(message, mapped.orders, outcome, warnings) },
      );
      messagesTotal.inc({
        type: typeLabel(type),
        ack: reply.duplicate
          ? `${ackLabel(reply.response.code)}-dup`
          : ackLabel(reply.response.code),
      });
      this.logger.info(
        {
          type,
          ack: reply.response.code,
          duplicate: reply.duplicate,
          inboundMessageId: reply.inboundMessageId,
          orders: reply.outcome?.results.length ?? 0,
        },
        'hl7 message handled',
      );
      return reply.response.body;
    } catch (error) {
      // Could not store it: AR 207 so that the sender keeps it and resends. Never an AA.
      messagesTotal.inc({ type: typeLabel(type), ack: 'AR-store' });
      this.logger.error({ type, err: (error as Error).message }, 'hl7 message could not be stored');
      return this.couldNotStore(message);
    }
  }

  /** Builds the answer inside the intake transaction, from what was applied. */
  private respond(
    message: Hl7Message,
    orders: readonly MappedOrder[],
    outcome: IntakeOutcome,
    warnings: Hl7ErrorDetail[],
  ): IntakeResponse {
    const unknown = outcome.results.filter((r) => r.kind === 'unknown-order');
    if (unknown.length > 0) {
      const errors: Hl7ErrorDetail[] = unknown.map((r) => ({
        location: 'ORC-2',
        code: 204,
        severity: 'E',
        message: `Unknown order: no order with this placer/filler number to ${r.kind === 'unknown-order' ? r.action : 'apply'} (${r.sourceRef})`,
      }));
      const ack = buildAck({
        inbound: message,
        outcome: 'error',
        errors,
        controlId: this.controlIds(),
        now: this.clock(),
      });
      return {
        code: ack.code,
        body: ack.bytes,
        contentType: 'application/hl7-v2',
        accepted: false,
      };
    }
    // A message that cancels or changes orders is answered per order (ORR^O02 / ORI^O24 with
    // ORC-1 CR / UC / XR / OK); plain new orders get the ACK every RIS expects.
    const perOrder = orders.some(
      (o) => o.request.action === 'cancel' || o.request.action === 'update',
    );
    const orderControls = perOrder
      ? outcome.results.map((result, i) => {
          const request = orders[i]!.request;
          const control: OrderControlReply['control'] =
            result.kind === 'cancel-accepted'
              ? 'CR'
              : result.kind === 'cancel-too-late'
                ? 'UC'
                : result.kind === 'updated'
                  ? 'XR'
                  : 'OK';
          return {
            control,
            placer: request.placerOrderNumber
              ? [request.placerOrderNumber.value, request.placerOrderNumber.system]
              : undefined,
            filler: request.fillerOrderNumber
              ? [request.fillerOrderNumber.value, request.fillerOrderNumber.system]
              : undefined,
          };
        })
      : undefined;
    const ack = buildAck({
      inbound: message,
      outcome: 'accept',
      errors: warnings,
      orderControls,
      controlId: this.controlIds(),
      now: this.clock(),
    });
    return { code: ack.code, body: ack.bytes, contentType: 'application/hl7-v2', accepted: true };
  }

  /**
   * AR with ERR 207 (table 0357 "Application internal error") when the message could not be
   * stored: the sender keeps it and resends. Never an AA for what was not stored.
   */
  private couldNotStore(message: Hl7Message): Buffer {
    return buildAck({
      inbound: message,
      outcome: 'reject',
      errors: [
        { code: 207, severity: 'E', message: 'Message could not be stored; please resend later' },
      ],
      controlId: this.controlIds(),
      now: this.clock(),
    }).bytes;
  }

  private async refuse(
    message: Hl7Message,
    base: {
      transport: 'mllp';
      sender: string | null;
      remoteAddress: string;
      messageType: string;
      messageControlId: string | null;
      raw: Buffer;
      contentType: string;
    },
    quirks: Array<{ code: string; detail: string }>,
    outcome: 'error' | 'reject',
    errors: Hl7ErrorDetail[],
  ): Promise<Buffer> {
    const ack = buildAck({
      inbound: message,
      outcome,
      errors,
      controlId: this.controlIds(),
      now: this.clock(),
    });
    messagesTotal.inc({ type: typeLabel(base.messageType), ack: ackLabel(ack.code) });
    const input: RejectionInput = {
      ...base,
      quirks,
      response: {
        code: ack.code,
        body: ack.bytes,
        contentType: 'application/hl7-v2',
        accepted: false,
      },
      problems: errors
        .filter((e) => e.severity === 'E')
        .map((e) => ({ location: e.location, code: String(e.code), message: e.message })),
    };
    if (!(await recordRefusal(this.intake, input, this.logger, 'rejected hl7 message'))) {
      return this.couldNotStore(message);
    }
    this.logger.info(
      { type: base.messageType, ack: ack.code, errors: errors.map((e) => e.code) },
      'hl7 message refused',
    );
    return ack.bytes;
  }

  /**
   * No usable MSH: answer a generic AR and keep the bytes. MSA-2 echoes MSH-10 when it can be
   * found by the field separator alone (an unusable MSH-2 still leaves it readable).
   */
  private async rejectUnparseable(
    raw: Buffer,
    meta: MllpMessageMeta,
    reason: string,
  ): Promise<Buffer> {
    const body = buildUnparseableAck({
      raw,
      reason,
      ourApplication: this.options.ourApplication ?? 'IMAGING-AI-ADAPTER',
      ourFacility: this.options.ourFacility ?? '',
      now: this.clock(),
      controlId: this.controlIds(),
    });
    messagesTotal.inc({ type: 'unparseable', ack: 'AR' });
    const input: RejectionInput = {
      transport: 'mllp',
      sender: null,
      remoteAddress: meta.remoteAddress,
      messageType: null,
      messageControlId: salvageControlId(raw) ?? null,
      raw,
      contentType: 'application/hl7-v2',
      quirks: [],
      response: { code: 'AR', body, contentType: 'application/hl7-v2', accepted: false },
      problems: [{ location: 'MSH', code: '100', message: `not an HL7 v2 message: ${reason}` }],
    };
    await recordRefusal(this.intake, input, this.logger, 'unparseable message');
    return body;
  }
}
