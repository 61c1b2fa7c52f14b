import type { ClaimedOutboxRow, OutboxRepository } from '../persistence/outbox.repository';
import type { PublicationRepository } from '../persistence/publication.repository';
import { OutboundError } from './outbound.error';
import type { Destination, OutboundSettings } from './outbound.settings';
import type { OutboxPayload } from './outbox-order-events';
import { loadPublication } from './publication.loader';
import type { DeliveryResult, Publisher } from './publisher';

/** An outbox row a worker holds the claim of. */
export type ClaimedRow = ClaimedOutboxRow<OutboxPayload> & { destination: Destination };

export interface AttemptDeps {
  outbox: OutboxRepository;
  publications: PublicationRepository;
  settings: OutboundSettings;
}

/**
 * One delivery attempt of a claimed row: the destination's answer, or what went wrong as an
 * answer (an OutboundError is final: dead; anything else is tried again). Never throws.
 */
export async function attemptDelivery(
  deps: AttemptDeps,
  publisher: Publisher,
  row: ClaimedRow,
): Promise<DeliveryResult> {
  try {
    const superseded = await supersededBy(deps.outbox, row);
    if (superseded) {
      return {
        outcome: 'delivered',
        answer: `not sent: superseded by the later ${row.kind} ${superseded} already delivered`,
        detail: { supersededBy: superseded },
      };
    }
    const entry = { id: row.id, kind: row.kind, attempts: row.attempts };
    if (publisher.deliverPayload) return await publisher.deliverPayload(entry, row.payload);
    const loaded = await loadPublication(deps.publications, deps.settings, row.payload);
    return await publisher.deliver(entry, loaded);
  } catch (error) {
    return error instanceof OutboundError
      ? {
          outcome: 'dead',
          answer: error.message,
          detail: { code: error.code, ...error.detail },
        }
      : {
          outcome: 'retry',
          answer: `delivery failed: ${(error as Error).name}`,
          detail: { error: (error as Error).message.slice(0, 300) },
        };
  }
}

/**
 * What a later row of the same kind replaces at the peer: the Task and the DiagnosticReport
 * (one resource per order, updated on our identifier), the ORM status and the ORU (the RIS
 * keeps the last one it took). The SR and the PDF are not among them: each revision is its
 * own instance, and the later one names it as its predecessor.
 */
const REPLACED_BY_LATER = new Set([
  'fhir-task',
  'fhir-diagnostic-report',
  'hl7-orm-status',
  'hl7-oru',
]);

/**
 * A replayed Task, DiagnosticReport, ORM status or ORU older than one already delivered would
 * move the clinic's view backwards (a first result's `final` and OBR-25 F over its correction,
 * a cancelled report over the result that followed): it is marked delivered without sending.
 */
async function supersededBy(outbox: OutboxRepository, row: ClaimedRow): Promise<string | null> {
  if (!REPLACED_BY_LATER.has(row.kind)) return null;
  return outbox.deliveredLaterThan({
    id: row.id,
    orderId: row.order_id,
    destination: row.destination,
    kind: row.kind,
  });
}
