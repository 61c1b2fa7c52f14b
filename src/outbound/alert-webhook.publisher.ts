import { Agent, request } from 'undici';
import { PeerBase } from '../common/peer-url';
import { parseRetryAfter } from '../common/retry-after';
import { DESTINATIONS } from './outbound.settings';
import type { DeliveryResult, OutboxItem, Publisher } from './publisher';

/** What an alert row of the outbox carries, and the JSON body the webhook receives. */
export interface AlertPayload {
  source: 'imaging-ai-adapter';
  kind: 'order-alert' | 'dead-letter' | 'dead-letter-summary';
  occurredAt: string;
  /** The order (order-alert, dead-letter); a summary names its orders in `deadLetters`. */
  orderId?: string;
  /** The order's audit timeline (a summary: the dead-letter list), relative to the adapter's base URL. */
  auditPath: string;
  /** order-alert: the alert code (`study-deadline`, `upstream-stuck`, …), end state and reason. */
  alert?: string;
  state?: string;
  reason?: string;
  /** dead-letter: which document gave up, where, and why. */
  deadLetter?: { outboxId: string; destination: string; documentKind: string; reason: string };
  /**
   * dead-letter-summary: the further dead letters of one destination and reason within the
   * window after the first one's alert (ALERT_COALESCE_SECONDS): how many, and their orders.
   */
  deadLetters?: DeadLetterSummary;
}

export interface DeadLetterSummary {
  destination: string;
  /** The failure's reason in fixed words (failure-reason.ts): what groups them. */
  reason: string;
  /** Dead letters in this summary; each is in exactly one alert (its own or a summary). */
  count: number;
  /** Their orders, each once (at most ALERT_SUMMARY_MAX_ORDERS; a full summary starts another). */
  orderIds: string[];
  firstAt: string;
  lastAt: string;
  /** When the window of the group's first alert ends (this summary is sent then). */
  windowEndsAt: string;
}

export interface AlertWebhookOptions {
  /** ALERT_WEBHOOK_URL: a credential-bearing peer (its path or query may hold a secret). */
  url: string;
  timeoutMs?: number;
}

/**
 * Order alerts and dead letters to a person: one JSON POST per alert row to ALERT_WEBHOOK_URL
 * (dead letters grouped per destination and reason, dead-letter-alert.ts),
 * retried through the outbox like any result (backoff, OUTBOUND_MAX_ATTEMPTS), a dead letter
 * of its own when it gives up (visible on the audit page, never alerted again). The URL is
 * a credential: it is checked once as a PeerBase (no user information, no ambiguous
 * encoding), redirects are not followed (a 3xx is a dead letter), and neither the URL nor a
 * library error that could quote it is written to an answer, the audit log or the log.
 */
export class AlertWebhookPublisher implements Publisher {
  readonly destination = DESTINATIONS.alert;
  private readonly target: URL;
  private readonly agent = new Agent({ keepAliveTimeout: 10_000 });
  private closed = false;

  constructor(private readonly options: AlertWebhookOptions) {
    this.target = new PeerBase('alert webhook', options.url).resolve(options.url);
  }

  deliver(): Promise<DeliveryResult> {
    return Promise.resolve({
      outcome: 'dead',
      answer: 'an alert row carries its own payload (deliverPayload)',
      detail: {},
    });
  }

  async deliverPayload(item: OutboxItem, payload: unknown): Promise<DeliveryResult> {
    let status: number;
    let retryAfter: string | string[] | undefined;
    try {
      const res = await request(this.target, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-outbox-id': item.id },
        body: JSON.stringify(payload),
        signal: AbortSignal.timeout(this.options.timeoutMs ?? 15_000),
        dispatcher: this.agent,
        // undici's request follows no redirect unless told to; said here for the reader.
      });
      status = res.statusCode;
      retryAfter = res.headers['retry-after'];
      await res.body.dump().catch(() => undefined);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code ?? (error as Error).name;
      return {
        outcome: 'retry',
        answer: `the alert webhook could not be reached (${code})`,
        detail: { code },
      };
    }
    if (status >= 200 && status < 300)
      return { outcome: 'delivered', answer: `HTTP ${status}`, detail: { status } };
    if (status >= 300 && status < 400)
      return {
        outcome: 'dead',
        answer: `HTTP ${status}: redirects are not followed (set ALERT_WEBHOOK_URL to the final URL)`,
        detail: { status },
      };
    if (status === 408 || status === 429 || status >= 500) {
      const retryAfterMs = parseRetryAfter(retryAfter, Date.now());
      return {
        outcome: 'retry',
        ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
        answer: `HTTP ${status}`,
        detail: { status },
      };
    }
    return {
      outcome: 'dead',
      answer: `HTTP ${status}: refused by the webhook`,
      detail: { status },
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.agent.close();
  }
}

/** What every alert says first: who sends it, what it is, when, and the order's audit page. */
function envelope(
  kind: AlertPayload['kind'],
  orderId: string,
): Pick<AlertPayload, 'source' | 'kind' | 'occurredAt' | 'orderId' | 'auditPath'> {
  return {
    source: 'imaging-ai-adapter',
    kind,
    occurredAt: new Date().toISOString(),
    orderId,
    auditPath: `/audit/orders/${orderId}`,
  };
}

export function orderAlertPayload(
  o: { orderId: string } & Required<Pick<AlertPayload, 'alert' | 'state' | 'reason'>>,
): AlertPayload {
  return {
    ...envelope('order-alert', o.orderId),
    alert: o.alert,
    state: o.state,
    reason: o.reason,
  };
}

/** A follow-up alert of a group, opened with its first dead letter (count 1). */
export function deadLetterSummaryPayload(d: {
  destination: string;
  reason: string;
  orderId: string;
  windowEndsAt: Date;
}): AlertPayload {
  const now = new Date().toISOString();
  return {
    source: 'imaging-ai-adapter',
    kind: 'dead-letter-summary',
    occurredAt: now,
    auditPath: '/audit/dead-letters',
    deadLetters: {
      destination: d.destination,
      reason: d.reason,
      count: 1,
      orderIds: [d.orderId],
      firstAt: now,
      lastAt: now,
      windowEndsAt: new Date(d.windowEndsAt).toISOString(),
    },
  };
}

export function deadLetterPayload(
  d: { orderId: string } & NonNullable<AlertPayload['deadLetter']>,
): AlertPayload {
  return {
    ...envelope('dead-letter', d.orderId),
    deadLetter: {
      outboxId: d.outboxId,
      destination: d.destination,
      documentKind: d.documentKind,
      reason: d.reason,
    },
  };
}
