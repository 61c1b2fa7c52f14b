import type { UpstreamStatus } from '../imaging-spec/imaging-spec';
import type { CallObserver, ClientLogger, Clock, RateLimiter } from './ports';

/** The values the ImagingClient takes and returns (imaging-client.ts). */

/** `order_id` is preferred; `study_uid` addresses the most recent order of that study (contract, Rules 1). */
export type OrderRef = { orderId: string } | { studyUid: string };

export type OrderMetadata = Record<string, unknown>;

export interface UpstreamDocument {
  contentType: string;
  body: Buffer;
}

export interface PresignedUrl {
  url: string;
  /** Epoch ms; undefined when the upstream did not say (then the contract's one hour applies). */
  expiresAt?: number;
}

export interface PartUrls {
  urls: Map<number, string>;
  expiresAt?: number;
}

export interface OrderSummary {
  orderId: string;
  studyUid?: string | null;
  status: UpstreamStatus;
  createdAt?: string | null;
  updatedAt?: string | null;
  batchId?: string | null;
}

/** A `/list-orders` entry whose status the contract does not name (kept out of the list). */
export interface UnknownStatusEntry {
  orderId: string;
  /** The value as sent, cut to 64 characters of `[A-Za-z0-9_.-]` (it is logged and audited). */
  status: string;
}

export interface ActiveOrders {
  orders: OrderSummary[];
  unknownStatus: UnknownStatusEntry[];
  /** Pages read (one call each); 1 unless the upstream pages the list. */
  pages: number;
}

export interface CreateOrderOptions {
  /** Our own key for the order; sent in its metadata as `correlation_id` so it can be found again. */
  correlationId: string;
  /**
   * An earlier attempt (e.g. a previous job run) may already have created the order: look
   * for it before creating. Within one call the client does this by itself after any
   * failure that may have taken effect upstream.
   */
  previouslyAttempted?: boolean;
  /** Only orders created at or after this time (epoch ms) are candidates when looking. */
  attemptedSince?: number;
  /**
   * Of the given upstream order ids, those already recorded for other orders of ours (e.g.
   * in our database): they are not the lost order, so a lookup does not read their metadata.
   */
  knownElsewhere?: (upstreamOrderIds: string[]) => Promise<ReadonlySet<string>>;
}

export interface CreatedOrder {
  orderId: string;
  /** True when the order already existed (found by correlation id) rather than created now. */
  recovered: boolean;
}

export interface ImagingClientDeps {
  clock: Clock;
  rateLimiter: RateLimiter;
  observer: CallObserver;
  logger: ClientLogger;
  /** Injected only by tests of the jitter. */
  random?: () => number;
}
