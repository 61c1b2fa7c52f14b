import type { LoadedPublication } from './publication.loader';
import type { Destination } from './outbound.settings';

/** The answer of one delivery attempt, as the outbox records it. */
export interface DeliveryResult {
  outcome: 'delivered' | 'retry' | 'dead';
  /** PHI-free one-liner (ACK code, HTTP status, reason). */
  answer: string;
  /** What the peer said (ACK MSA/ERR, HTTP status, OperationOutcome issues, STOW failures). */
  detail: Record<string, unknown>;
}

export interface OutboxItem {
  id: string;
  kind: string;
  attempts: number;
}

/** One destination's sender. Never throws for a peer's answer: it classifies it. */
export interface Publisher {
  readonly destination: Destination;
  deliver(item: OutboxItem, loaded: LoadedPublication): Promise<DeliveryResult>;
  /** Rows that carry their whole message (alerts): delivered from the payload, no publication. */
  deliverPayload?(item: OutboxItem, payload: unknown): Promise<DeliveryResult>;
  close(): Promise<void>;
}
