import { AppError } from '../common/app-error';
import { FhirBundleOperation } from '../inbound-fhir/fhir-bundle.operation';
import { FhirError } from '../inbound-fhir/fhir.error';
import { CreateServiceRequestOperation } from '../inbound-fhir/service-request-create.operation';
import type { FhirAnswer, FhirCaller } from '../inbound-fhir/fhir-operation.shared';
import type { MllpListenerService } from '../inbound-hl7/mllp-listener.service';
import type { AuditQueryService } from './audit-query.service';

export interface ReprocessResult {
  originalMessageId: string;
  /** The accepted message the reprocess became (null while it is still refused). */
  reprocessedMessageId: string | null;
  /** true: this message was reprocessed before; its first result is answered, nothing created. */
  duplicate: boolean;
  idempotencyKey: string;
  answer: { code: string; contentType: string; body: string };
  orderIds: string[];
  auditEventKind: 'message.reprocessed';
}

/** The idempotency key of a reprocess: one per original message, so it is applied once. */
export function reprocessKey(id: string): string {
  return `reprocess:${id}`;
}

/**
 * An admin's reprocess of a refused inbound message (after the site's mapping changed): its
 * stored raw bytes run again through the intake path of its transport (the MLLP handler's
 * pipeline, the FHIR create or Bundle operation) under the key `reprocess:<id>`, so the
 * intake's exactly-once rule holds: a second reprocess is answered with the first result.
 */
export class MessageReprocessor {
  constructor(
    private readonly query: AuditQueryService,
    private readonly mllp: MllpListenerService,
    private readonly createOp: CreateServiceRequestOperation,
    private readonly bundleOp: FhirBundleOperation,
  ) {}

  async reprocess(id: string, actor: string, reason: string): Promise<ReprocessResult> {
    const text = (reason ?? '').trim();
    if (text.length < 3) throw new AppError('bad_request', 'a reason is required to reprocess');
    const { message } = await this.query.message(id);
    if (message.outcome === 'accepted') {
      throw new AppError(
        'conflict',
        'the message was accepted; only a refused message can be reprocessed',
      );
    }
    const key = reprocessKey(id);
    const earlier = await this.query.acceptedByIdempotencyKey(key);
    let answer: ReprocessResult['answer'];
    if (earlier) {
      // Reprocessed before: the first result is the answer; nothing runs, nothing is created.
      const first = (await this.query.message(earlier.id)).message;
      answer = {
        code: first.responseCode ?? '?',
        contentType: first.responseContentType ?? 'application/octet-stream',
        body:
          first.response?.toString(
            first.responseContentType === 'application/hl7-v2' ? 'latin1' : 'utf8',
          ) ?? '',
      };
    } else if (message.transport === 'mllp') {
      const { body } = await this.mllp.reprocess(message.raw, {
        idempotencyKey: key,
        actor,
        remoteAddress: message.remoteAddress ?? 'reprocess',
      });
      const text = body.toString('latin1');
      answer = {
        code: /(?:^|\r)MSA\|([A-Z]{2})/.exec(text)?.[1] ?? '?',
        contentType: 'application/hl7-v2',
        body: text,
      };
    } else if (message.transport === 'fhir-rest') {
      answer = await this.fhir(message, actor, key);
    } else {
      throw new AppError(
        'conflict',
        `a ${message.transport} message cannot be reprocessed (only MLLP and FHIR REST)`,
      );
    }
    const accepted = earlier ?? (await this.query.acceptedByIdempotencyKey(key));
    const reprocessedId = accepted?.id ?? null;
    const orderIds = reprocessedId
      ? [
          ...new Set(
            (await this.query.message(reprocessedId)).events
              .map((e) => e.orderId)
              .filter((o): o is string => Boolean(o)),
          ),
        ]
      : [];
    const duplicate = Boolean(earlier);
    await this.query.recordReprocess({
      actor,
      reason: text,
      originalId: id,
      reprocessedId,
      answerCode: answer.code,
      duplicate,
      orderIds,
    });
    return {
      originalMessageId: id,
      reprocessedMessageId: reprocessedId,
      duplicate,
      idempotencyKey: key,
      answer,
      orderIds,
      auditEventKind: 'message.reprocessed',
    };
  }

  private async fhir(
    message: {
      messageType: string | null;
      sender: string | null;
      remoteAddress: string | null;
      raw: Buffer;
      contentType: string | null;
      ifNoneExist: string | null;
    },
    actor: string,
    key: string,
  ): Promise<ReprocessResult['answer']> {
    const caller: FhirCaller = {
      sender: message.sender ?? 'unknown',
      actor,
      remoteAddress: message.remoteAddress,
      raw: message.raw,
      contentType: message.contentType ?? 'application/fhir+json',
    };
    let result: FhirAnswer;
    try {
      if (message.messageType === 'ServiceRequest create') {
        // a conditional create stays one (R4 http.html#ccreate): the order made since under
        // its identifier is the answer, not a second order or a 409 of other content
        result = await this.createOp.execute(caller, message.ifNoneExist ?? undefined, {
          idempotencyKey: key,
        });
      } else if (message.messageType?.startsWith('Bundle')) {
        result = await this.bundleOp.execute(caller, { idempotencyKey: key });
      } else {
        throw new AppError(
          'conflict',
          `a FHIR ${message.messageType ?? 'request'} cannot be reprocessed (only ServiceRequest create and Bundles)`,
        );
      }
    } catch (error) {
      if (!(error instanceof FhirError)) throw error;
      return {
        code: String(error.httpStatus),
        contentType: 'application/fhir+json',
        body: JSON.stringify(error.toOperationOutcome()),
      };
    }
    return {
      code: String(result.status),
      contentType: 'application/fhir+json',
      body: JSON.stringify(result.resource ?? null),
    };
  }
}
