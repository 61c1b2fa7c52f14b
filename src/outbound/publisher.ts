import type { LoadedPublication } from './publication.loader';
import type { Destination } from './outbound.settings';

/** The answer of one delivery attempt, as the outbox records it. */
export interface DeliveryResult {
  outcome: 'delivered' | 'retry' | 'dead';
  /** PHI-free one-liner (ACK code, HTTP status, reason). */
  answer: string;
  /** What the peer said (ACK MSA/ERR, HTTP status, OperationOutcome issues, STOW failures). */
  detail: Record<string, unknown>;
  /** The document as it went out (HL7 text, FHIR JSON, a DICOM tag dump), when it was built. */
  sent?: ExchangeText;
  /** With a retry: how long the peer asked us to wait (its Retry-After), a floor for the backoff. */
  retryAfterMs?: number;
  /** The peer's raw answer (ACK bytes as text, HTTP status with its body), when one came. */
  response?: ExchangeText & { status?: number | string };
}

/** A text as exchanged with a peer, bounded (outbox.last_exchange). */
export interface ExchangeText {
  contentType: string;
  text: string;
}

/** Longest text kept per side of an exchange (an ORU with a long report fits; a PDF does not). */
export const EXCHANGE_TEXT_LIMIT = 256 * 1024;

export function exchangeText(contentType: string, text: string): ExchangeText {
  return {
    contentType,
    text:
      text.length > EXCHANGE_TEXT_LIMIT
        ? `${text.slice(0, EXCHANGE_TEXT_LIMIT)}\n… (${text.length - EXCHANGE_TEXT_LIMIT} more characters not kept)`
        : text,
  };
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
