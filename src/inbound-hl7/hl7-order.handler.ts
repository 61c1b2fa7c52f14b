import type { Logger } from 'pino';
import { recordRefusal } from '../common/refusal';
import {
  type Hl7ErrorDetail,
  type Hl7Message,
  type MllpMessageMeta,
  type Hl7ParseLimits,
  salvageControlId,
  acceptAckWanted,
  acknowledgmentCondition,
  type AckOutcome,
  buildAck,
  newAckControlId,
  batchCountNote,
  buildBatchAck,
  isHl7Batch,
  isResendOf,
  splitHl7Batch,
  type StructureCheckOptions,
} from '../hl7';
import type { Hl7OrderMappingConfig } from '../mappings/hl7-order.config';
import type {
  IntakeReply,
  OrderIntakeService,
  RejectionInput,
} from '../orders/order-intake.service';
import {
  answerMappedMessage,
  evaluateHl7Message,
  refusalAck,
  reusedControlIdAnswer,
  unparseableAck,
  type AckStamp,
} from './hl7-order.pipeline';
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
  private readonly stamp: AckStamp;

  constructor(
    private readonly intake: OrderIntakeService,
    private readonly logger: Logger,
    private readonly options: Hl7OrderHandlerOptions = {},
  ) {
    this.clock = options.clock ?? (() => new Date());
    this.controlIds = options.controlIds ?? newAckControlId;
    this.stamp = { controlId: this.controlIds, now: this.clock };
  }

  async handle(raw: Buffer, meta: MllpMessageMeta): Promise<Buffer> {
    if (isHl7Batch(raw)) return this.handleBatch(raw, meta);
    const { body, unwanted } = await this.process(raw, meta);
    // Enhanced mode (MSH-15/16, table 0155) that wants no answer for this outcome (NE|NE, or
    // ER|ER on success): stored and answered in the audit log, nothing written to the peer.
    return unwanted ? Buffer.alloc(0) : body;
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
    // BTS-1 is how a receiver notices messages lost on the way (a file cut short, a frame an
    // engine truncated): a count that differs is said with every message of the batch (its
    // quirks in the audit log) and in the batch acknowledgment's BTS-2. Before, it was read
    // and never compared. Each batch of a file is held to its own BTS-1, the note going with
    // that batch's messages only (before, the counts of a file's batches were summed).
    const acks: Buffer[] = [];
    let next = 0;
    for (const part of split.batches) {
      const countNote = batchCountNote(part);
      const messageMeta: BatchMessageMeta = countNote
        ? { ...meta, batchCountNote: countNote }
        : meta;
      if (countNote)
        this.logger.warn({ declared: part.declaredCount, received: part.messageCount }, countNote);
      for (const message of split.messages.slice(next, next + part.messageCount))
        acks.push(await this.handleMessage(message, messageMeta));
      next += part.messageCount;
    }
    messagesTotal.inc({ type: 'batch', ack: 'batch' });
    // Every message said it wants no answer (MSH-15/16 NE|NE, or ER|ER and all accepted): no
    // batch acknowledgment either. One holding no ACK is not empty of meaning: a batch of zero
    // acknowledgments tells the sender every message was taken (v2.5.1 §2.10.3), an answer
    // nobody asked for, and a one-way feed that later sends on the same connection read it as
    // the answer to its next message. Before, FHS/BHS/BTS|0/FTS was sent. A BTS-1 count that
    // differs is kept with each message (quirk batch-count-mismatch), as with an answer.
    if (acks.every((a) => a.length === 0)) return Buffer.alloc(0);
    return buildBatchAck({
      batch: split,
      acks,
      ourApplication: this.options.ourApplication ?? 'IMAGING-AI-ADAPTER',
      ourFacility: this.options.ourFacility ?? '',
      controlId: this.controlIds,
      now: this.clock(),
    });
  }

  /**
   * One message: read by the pure pipeline (hl7-order.pipeline.ts, shared with the dry run),
   * then stored and answered. `options.idempotencyKey` replaces the key derived from the
   * message (an admin's reprocess of a stored message uses `reprocess:<id>`).
   */
  private async handleMessage(raw: Buffer, meta: BatchMessageMeta): Promise<Buffer> {
    // A message whose MSH-15/16 want no answer of this outcome (NE|NE) gets none inside a batch
    // either: an empty ACK is left out of the batch acknowledgment (and of BTS-1). Before, it
    // was answered there all the same.
    const { body, unwanted } = await this.process(raw, meta);
    return unwanted ? Buffer.alloc(0) : body;
  }

  async process(
    raw: Buffer,
    meta: BatchMessageMeta,
    options: { idempotencyKey?: string; actor?: string } = {},
  ): Promise<{ body: Buffer; reply?: IntakeReply; unwanted?: boolean }> {
    const evaluation = evaluateHl7Message(raw, this.options);
    if (evaluation.kind === 'unparseable') {
      return {
        body: await this.rejectUnparseable(raw, meta, evaluation.reason, evaluation.mshField),
      };
    }
    const { message, type, sender } = evaluation;
    // Whether the sender wants the answer of this code (MSA-1 AA/CA accept, AE/CE error, AR/CR
    // reject); a store failure (AR 207) is always answered, so the message is never lost unsaid.
    // Only when the sender says so in both fields: an MSH-15 NE beside an empty MSH-16 (a
    // shifted field, `AL|NE` written `NE|`) is still answered, as it was.
    const explicit =
      acknowledgmentCondition(message, 15) !== undefined &&
      acknowledgmentCondition(message, 16) !== undefined;
    const unwanted = (code: string): boolean =>
      explicit && !acceptAckWanted(message, OUTCOME_OF_CODE[code.charAt(1)] ?? 'reject');
    const silence =
      explicit && NEVER_ANSWERED.every((o) => !acceptAckWanted(message, o))
        ? [
            {
              code: 'no-acknowledgment-wanted',
              detail: `MSH-15/MSH-16 ${message.msh.value(15) ?? ''}|${message.msh.value(16) ?? ''}: no acknowledgment is sent`,
            },
          ]
        : [];
    const base = {
      transport: 'mllp' as const,
      sender,
      remoteAddress: meta.remoteAddress,
      messageType: type,
      messageControlId: message.controlId || null,
      raw,
      contentType: 'application/hl7-v2',
    };
    if (evaluation.kind === 'refused') {
      const refusal = await this.refuse(
        message,
        base,
        [...framingQuirks(meta), ...silence, ...evaluation.quirks],
        evaluation.outcome,
        evaluation.errors,
      );
      return {
        body: refusal.body,
        unwanted: refusal.stored !== undefined && unwanted(refusal.stored),
      };
    }
    const { mapped, warnings } = evaluation;
    const idempotencyKey = options.idempotencyKey ?? evaluation.idempotencyKey;

    try {
      const reply = await this.intake.ingest(
        {
          ...base,
          idempotencyKey,
          quirks: [...framingQuirks(meta), ...silence, ...evaluation.quirks],
          mappingVersion: mapped.mappingVersion,
          orders: mapped.orders.map((o) => ({
            request: o.request,
            lineage: o.lineage,
            sourceRef: `ORC/OBR group ${o.groupIndex}`,
          })),
          patientEvents: mapped.patientEvents,
          ...(options.actor ? { actor: options.actor } : {}),
        },
        {
          respond: (outcome) =>
            answerMappedMessage(message, mapped.orders, outcome, warnings, this.stamp),
          reusedKey: (originalRaw) =>
            options.idempotencyKey || isResendOf(raw, originalRaw)
              ? undefined
              : reusedControlIdAnswer(message, this.stamp),
        },
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
      return { body: reply.response.body, reply, unwanted: unwanted(reply.response.code) };
    } catch (error) {
      // Could not store it: AR 207 so that the sender keeps it and resends. Never an AA.
      messagesTotal.inc({ type: typeLabel(type), ack: 'AR-store' });
      this.logger.error({ type, err: (error as Error).message }, 'hl7 message could not be stored');
      return { body: this.couldNotStore(message) };
    }
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
  ): Promise<{ body: Buffer; stored?: string }> {
    const ack = refusalAck(message, outcome, errors, this.stamp);
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
      return { body: this.couldNotStore(message) };
    }
    this.logger.info(
      { type: base.messageType, ack: ack.code, errors: errors.map((e) => e.code) },
      'hl7 message refused',
    );
    return { body: ack.bytes, stored: ack.code };
  }

  /**
   * No usable MSH: answer a generic AR and keep the bytes. MSA-2 echoes MSH-10 when it can be
   * found by the field separator alone (an unusable MSH-2 still leaves it readable).
   */
  private async rejectUnparseable(
    raw: Buffer,
    meta: MllpMessageMeta,
    reason: string,
    mshField?: number,
  ): Promise<Buffer> {
    const body = unparseableAck(raw, reason, this.options, this.stamp, mshField);
    messagesTotal.inc({ type: 'unparseable', ack: 'AR' });
    const input: RejectionInput = {
      transport: 'mllp',
      sender: null,
      remoteAddress: meta.remoteAddress,
      messageType: null,
      messageControlId: salvageControlId(raw) ?? null,
      raw,
      contentType: 'application/hl7-v2',
      quirks: framingQuirks(meta),
      response: { code: 'AR', body, contentType: 'application/hl7-v2', accepted: false },
      problems: [{ location: 'MSH', code: '100', message: `not an HL7 v2 message: ${reason}` }],
    };
    await recordRefusal(this.intake, input, this.logger, 'unparseable message');
    return body;
  }
}

/** MSA-1's second letter (table 0008: AA/CA, AE/CE, AR/CR) as the outcome it answers. */
const OUTCOME_OF_CODE: Readonly<Record<string, AckOutcome>> = {
  A: 'accept',
  E: 'error',
  R: 'reject',
};
const NEVER_ANSWERED: readonly AckOutcome[] = ['accept', 'error', 'reject'];

/** What the MLLP framing tolerated for this message (recorded with it like the parser's quirks). */
function framingQuirks(meta: BatchMessageMeta): Array<{ code: string; detail: string }> {
  return [
    ...(meta.missingCr
      ? [
          {
            code: 'mllp-missing-cr',
            detail: 'the frame ended with FS alone or FS LF (the trailer is FS CR)',
          },
        ]
      : []),
    ...(meta.batchCountNote ? [{ code: 'batch-count-mismatch', detail: meta.batchCountNote }] : []),
  ];
}

/** How a message arrived: its frame, and for a message of a batch what the envelope said. */
type BatchMessageMeta = MllpMessageMeta & { batchCountNote?: string };
