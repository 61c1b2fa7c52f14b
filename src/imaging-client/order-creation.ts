import type { ImagingClientConfig } from './imaging-client.config';
import { ImagingClientError } from './imaging-client.error';
import type {
  CreatedOrder,
  CreateOrderOptions,
  OrderMetadata,
  OrderRef,
  OrderSummary,
} from './imaging-client.types';
import type { ClientLogger, Clock } from './ports';
import type { UpstreamHttp } from './upstream-http';
import {
  isUpstreamOrderId,
  orderIdSchema,
  parseJson,
  sameUpstreamOrderId,
  upstreamOrderIdKey,
} from './upstream-schemas';
import { upstreamInstant } from './upstream-time';

/** Clock skew and upstream latency tolerated when matching `created_at` of a lost order. */
const CORRELATION_LOOKBACK_MS = 10 * 60_000;

/** The reads and the cancel a correlation lookup needs (the ImagingClient's own methods). */
export interface OrderLookupCalls {
  listOrders(): Promise<OrderSummary[]>;
  getMetadata(ref: OrderRef): Promise<{ orderId: string; metadata: OrderMetadata }>;
  cancelOrder(orderId: string): Promise<unknown>;
}

type KnownElsewhere = CreateOrderOptions['knownElsewhere'];

/**
 * `POST /new-order` made safe to repeat. Creating is not idempotent upstream, so every order
 * carries our `correlation_id` in its metadata, and after any failure that may have created
 * the order anyway the order is looked up by it rather than created again.
 */
export class OrderCreation {
  /**
   * Correlation id of each active upstream order this process created or read the metadata
   * of. A lookup by correlation id reads `GET /metadata` only for PENDING orders it knows
   * nothing about: otherwise every lookup costs one call per order waiting for its upload,
   * and under faults those lookups eat the endpoint's whole rate budget (docs/fire.md).
   * Pruned to the active list at every lookup, so it never outgrows the orders in flight.
   */
  private readonly correlationOf = new Map<string, string>();

  constructor(
    private readonly http: UpstreamHttp,
    private readonly calls: OrderLookupCalls,
    private readonly config: Pick<ImagingClientConfig, 'createSettleMs'>,
    private readonly deps: { clock: Clock; logger: ClientLogger },
  ) {}

  /**
   * Looks first when an earlier attempt may have created the order; after a failure that
   * may have taken effect (timeout, dropped connection, 5xx) looks before retrying; and
   * after creating anew following such a failure, settles duplicates.
   */
  async create(metadata: OrderMetadata, options: CreateOrderOptions): Promise<CreatedOrder> {
    const since = options.attemptedSince ?? this.deps.clock.now();
    if (options.previouslyAttempted) {
      const found = await this.findFirst(
        options.correlationId,
        options.attemptedSince,
        options.knownElsewhere,
      );
      if (found) return { orderId: found, recovered: true };
    }
    const body = { ...metadata, correlation_id: options.correlationId };
    let ambiguous = false;
    const created = await this.http.call<CreatedOrder>({
      operation: 'new-order',
      method: 'POST',
      path: '/new-order',
      json: body,
      auth: 'bearer',
      parse: (r) => ({
        orderId: parseJson('new-order', r, orderIdSchema).order_id,
        recovered: false,
      }),
      beforeRetry: async (failure) => {
        // 429 means "not processed"; anything else may have created the order.
        if (failure.kind === 'status' && failure.status === 429) return undefined;
        ambiguous = true;
        const found = await this.findFirst(options.correlationId, since, options.knownElsewhere);
        if (found) {
          this.deps.logger.info(
            { operation: 'new-order', orderId: found },
            'order created by an earlier attempt found',
          );
          return { orderId: found, recovered: true };
        }
        return undefined;
      },
    });
    this.correlationOf.set(upstreamOrderIdKey(created.orderId), options.correlationId);
    if (created.recovered || !ambiguous || this.config.createSettleMs <= 0) return created;
    return this.settleDuplicates(options.correlationId, since, created, options.knownElsewhere);
  }

  /**
   * After creating anew following an attempt whose fate was unknown, that attempt may still
   * be acted on late (the upstream held it past our timeout and our lookup). Wait a moment,
   * look again, keep the oldest order with our correlation id and cancel the others: they
   * are PENDING and empty, so cancelling them loses nothing.
   */
  private async settleDuplicates(
    correlationId: string,
    since: number,
    created: CreatedOrder,
    knownElsewhere: KnownElsewhere,
  ): Promise<CreatedOrder> {
    try {
      await this.deps.clock.sleep(this.config.createSettleMs);
      const matches = await this.findAll(correlationId, since, knownElsewhere);
      if (matches.length <= 1) return created;
      const [keep, ...duplicates] = matches;
      for (const duplicate of duplicates) {
        this.deps.logger.warn(
          { operation: 'new-order', orderId: duplicate, kept: keep },
          'duplicate order from a late-acted create; cancelling it',
        );
        await this.calls.cancelOrder(duplicate).catch((error: unknown) => {
          this.deps.logger.warn(
            { operation: 'cancel-order', orderId: duplicate, code: errorCode(error) },
            'could not cancel duplicate order',
          );
        });
      }
      return { orderId: keep, recovered: keep !== created.orderId };
    } catch (error) {
      // The order exists; failing to double-check must not make the caller create another.
      this.deps.logger.warn(
        { operation: 'new-order', code: errorCode(error) },
        'duplicate check after an ambiguous create failed',
      );
      return created;
    }
  }

  /**
   * Finds the active order created with our `correlation_id`: it can only be an order never
   * uploaded to (PENDING), because we never learned its id. The oldest wins, as when
   * duplicates are settled.
   */
  async findFirst(
    correlationId: string,
    createdSince?: number,
    knownElsewhere?: KnownElsewhere,
  ): Promise<string | undefined> {
    return (await this.findAll(correlationId, createdSince, knownElsewhere, true))[0];
  }

  private async findAll(
    correlationId: string,
    createdSince: number | undefined,
    knownElsewhere: KnownElsewhere,
    firstOnly = false,
  ): Promise<string[]> {
    const orders = await this.calls.listOrders();
    // Keyed by upstreamOrderIdKey: a list naming our orders in another case than the create
    // answered them is the same orders (RFC 9562 §4), not unknown ones whose metadata is read.
    const active = new Set(orders.map((order) => upstreamOrderIdKey(order.orderId)));
    for (const id of this.correlationOf.keys()) if (!active.has(id)) this.correlationOf.delete(id);
    // An id that is no UUID (`../x?y#z`) is no order `/new-order` could have answered us with.
    const candidates = pendingSince(orders, createdSince).filter((order) =>
      isUpstreamOrderId(order.orderId),
    );
    const unknown = candidates
      .map((order) => order.orderId)
      .filter((id) => !this.correlationOf.has(upstreamOrderIdKey(id)));
    const elsewhere = new Set(
      [...(knownElsewhere && unknown.length > 0 ? await knownElsewhere(unknown) : [])].map(
        upstreamOrderIdKey,
      ),
    );
    const found: string[] = [];
    for (const candidate of candidates) {
      const key = upstreamOrderIdKey(candidate.orderId);
      let owner = this.correlationOf.get(key);
      if (owner === undefined) {
        if (elsewhere.has(key)) continue;
        let answer: { orderId: string; metadata: OrderMetadata };
        try {
          answer = await this.calls.getMetadata({ orderId: candidate.orderId });
        } catch (error) {
          // Gone between the list and this read (cancelled, expired): not ours to resume.
          if (error instanceof ImagingClientError && error.code === 'not_found') continue;
          throw error;
        }
        if (!sameUpstreamOrderId(answer.orderId, candidate.orderId)) {
          // Metadata of another order says nothing of this one (an upstream cache or routing
          // mix-up): taken as it stands, another system's order could be resumed as ours and
          // our patient's study uploaded into it. Not remembered: asked again next time.
          this.deps.logger.warn(
            { operation: 'metadata', orderId: candidate.orderId },
            'GET /metadata answered about another order; not taken as ours',
          );
          continue;
        }
        const { metadata } = answer;
        owner = typeof metadata.correlation_id === 'string' ? metadata.correlation_id : '';
        // An order created without a correlation id is remembered as nobody's.
        this.correlationOf.set(key, owner);
      }
      if (owner === correlationId) {
        found.push(candidate.orderId);
        if (firstOnly) break;
      }
    }
    return found;
  }
}

/**
 * The PENDING orders that may have been created since `createdSince` (give or take), oldest
 * first. An order whose `created_at` names no instant (no zone, upstream-time.ts) may be ours
 * whenever it was made: it stays a candidate (one `GET /metadata` more), never left out.
 */
function pendingSince(orders: OrderSummary[], createdSince: number | undefined): OrderSummary[] {
  const earliest = createdSince === undefined ? undefined : createdSince - CORRELATION_LOOKBACK_MS;
  return (
    orders
      .filter((order) => order.status === 'PENDING')
      .map((order) => ({ order, created: upstreamInstant(order.createdAt) }))
      .filter(
        ({ created }) => earliest === undefined || created === undefined || created >= earliest,
      )
      // By instant, not by text (`…:00.5Z` sorts before `…:00Z`, offsets not at all); orders
      // whose instant is unknown keep the list's order.
      .sort((a, b) =>
        a.created === undefined || b.created === undefined ? 0 : a.created - b.created,
      )
      .map(({ order }) => order)
  );
}

function errorCode(error: unknown): string {
  return error instanceof ImagingClientError ? error.code : 'unknown';
}
