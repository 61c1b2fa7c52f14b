import { PeerBase } from '../common/peer-url';
import {
  QC_ROUND_HEADER,
  QC_ROUNDS,
  UPSTREAM_STATUSES,
  type FailureReportType,
  type QcReportType,
  type QcRound,
  type ReportType,
  type TokenResponse,
  type UpstreamStatus,
} from '../imaging-spec/imaging-spec';
import type { ImagingClientConfig } from './imaging-client.config';
import { ImagingClientError } from './imaging-client.error';
import type { CallObserver, ClientLogger, Clock, RateLimiter, UploadedPart } from './ports';
import { readAllPages, type PageRequest } from './list-pages';
import { TokenProvider } from './token-provider';
import {
  headerValue,
  UpstreamHttp,
  type CallSpec,
  type RetirementState,
  type UpstreamResponse,
} from './upstream-http';
import {
  abortSchema,
  agentReportsSchema,
  associateSchema,
  batchSchema,
  cancelSchema,
  completeSchema,
  heartbeatSchema,
  initiateSchema,
  listOrdersSchema,
  metadataSchema,
  orderIdSchema,
  parseJson,
  partUrlsSchema,
  presignedUrlSchema,
  productsSchema,
  qcBypassSchema,
  recentActivitySchema,
  reportsAckSchema,
  reportsPollSchema,
  statusSchema,
  testTokenSchema,
  tokenSchema,
} from './upstream-schemas';

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

const KNOWN_STATUSES: ReadonlySet<string> = new Set(UPSTREAM_STATUSES);

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

/** Clock skew and upstream latency tolerated when matching `created_at` of a lost order. */
const CORRELATION_LOOKBACK_MS = 10 * 60_000;

/**
 * The typed client of the Imaging Analysis Service /v1: one method per current operation
 * of the contract. Payload details the contract leaves open follow
 * docs/upstream-assumptions.md.
 */
export class ImagingClient {
  readonly http: UpstreamHttp;
  private readonly tokens: TokenProvider;
  /**
   * Correlation id of each active upstream order this process created or read the metadata
   * of. A lookup by correlation id reads `GET /metadata` only for PENDING orders it knows
   * nothing about: otherwise every lookup costs one call per order waiting for its upload,
   * and under faults those lookups eat the endpoint's whole rate budget (docs/fire.md).
   * Pruned to the active list at every lookup, so it never outgrows the orders in flight.
   */
  private readonly correlationOf = new Map<string, string>();
  /** IMAGING_BASE_URL as the one peer a next-page link may point into. */
  private peer?: PeerBase;

  constructor(
    readonly config: ImagingClientConfig,
    private readonly deps: ImagingClientDeps,
  ) {
    this.http = new UpstreamHttp(config, deps);
    this.tokens = new TokenProvider(
      async () => {
        const token = await this.requestToken();
        return { accessToken: token.access_token, expiresInSeconds: token.expires_in };
      },
      deps.clock,
      config.tokenRenewBeforeMs,
    );
    this.http.setTokenSource(this.tokens);
  }

  /** Set once the upstream answered 410: every later call fails fast without a request. */
  get retired(): RetirementState | undefined {
    return this.http.retired;
  }

  close(): Promise<void> {
    return this.http.close();
  }

  /**
   * How long a call to `endpoint` (an API path, e.g. `/new-order`) would wait for our rate
   * budget if made now; 0 when it could go at once (or the limiter cannot say).
   */
  async budgetWaitMs(endpoint: string): Promise<number> {
    return (await this.deps.rateLimiter.waitMs?.(endpoint)) ?? 0;
  }

  // ---- Authentication ----

  /** `POST /auth/token` (client credentials, HTTP Basic). Normally used through the token cache. */
  requestToken(): Promise<TokenResponse> {
    return this.http.call({
      operation: 'token',
      method: 'POST',
      path: '/auth/token',
      form: { grant_type: 'client_credentials' },
      auth: 'basic',
      parse: (r) => {
        const token = parseJson('token', r, tokenSchema);
        return { ...token, token_type: 'Bearer' as const };
      },
    });
  }

  /** `GET /test-token`: validates the token; a connectivity check without side effects. */
  testToken() {
    return this.http.call({
      operation: 'test-token',
      method: 'GET',
      path: '/test-token',
      auth: 'bearer',
      parse: (r) => parseJson('test-token', r, testTokenSchema),
    });
  }

  // ---- Orders and metadata ----

  /**
   * `POST /new-order`. Creating is not idempotent upstream, so after any failure that may
   * have created the order anyway (timeout, dropped connection, 5xx) the client first looks
   * for an order carrying our `correlation_id` and returns it instead of creating another.
   */
  async createOrder(metadata: OrderMetadata, options: CreateOrderOptions): Promise<CreatedOrder> {
    const since = options.attemptedSince ?? this.deps.clock.now();
    if (options.previouslyAttempted) {
      const found = await this.findOrderByCorrelationId(
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
        const found = await this.findOrderByCorrelationId(
          options.correlationId,
          since,
          options.knownElsewhere,
        );
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
    this.correlationOf.set(created.orderId, options.correlationId);
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
    knownElsewhere: CreateOrderOptions['knownElsewhere'],
  ): Promise<CreatedOrder> {
    try {
      await this.deps.clock.sleep(this.config.createSettleMs);
      const matches = await this.findOrdersByCorrelationId(correlationId, since, knownElsewhere);
      if (matches.length <= 1) return created;
      const [keep, ...duplicates] = matches;
      for (const duplicate of duplicates) {
        this.deps.logger.warn(
          { operation: 'new-order', orderId: duplicate, kept: keep },
          'duplicate order from a late-acted create; cancelling it',
        );
        await this.cancelOrder(duplicate).catch((error: unknown) => {
          this.deps.logger.warn(
            {
              operation: 'cancel-order',
              orderId: duplicate,
              code: error instanceof ImagingClientError ? error.code : 'unknown',
            },
            'could not cancel duplicate order',
          );
        });
      }
      return { orderId: keep, recovered: keep !== created.orderId };
    } catch (error) {
      // The order exists; failing to double-check must not make the caller create another.
      this.deps.logger.warn(
        {
          operation: 'new-order',
          code: error instanceof ImagingClientError ? error.code : 'unknown',
        },
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
  async findOrderByCorrelationId(
    correlationId: string,
    createdSince?: number,
    knownElsewhere?: CreateOrderOptions['knownElsewhere'],
  ): Promise<string | undefined> {
    return (
      await this.findOrdersByCorrelationId(correlationId, createdSince, knownElsewhere, true)
    )[0];
  }

  private async findOrdersByCorrelationId(
    correlationId: string,
    createdSince: number | undefined,
    knownElsewhere: CreateOrderOptions['knownElsewhere'],
    firstOnly = false,
  ): Promise<string[]> {
    const orders = await this.listOrders();
    const active = new Set(orders.map((order) => order.orderId));
    for (const id of this.correlationOf.keys()) if (!active.has(id)) this.correlationOf.delete(id);
    const earliest =
      createdSince === undefined ? undefined : createdSince - CORRELATION_LOOKBACK_MS;
    const candidates = orders
      .filter((order) => order.status === 'PENDING')
      .filter((order) => {
        if (earliest === undefined || !order.createdAt) return true;
        const created = Date.parse(order.createdAt);
        return Number.isNaN(created) || created >= earliest;
      })
      .sort((a, b) => (a.createdAt ?? '').localeCompare(b.createdAt ?? ''));
    const unknown = candidates
      .map((order) => order.orderId)
      .filter((id) => !this.correlationOf.has(id));
    const elsewhere =
      knownElsewhere && unknown.length > 0 ? await knownElsewhere(unknown) : new Set<string>();
    const found: string[] = [];
    for (const candidate of candidates) {
      let owner = this.correlationOf.get(candidate.orderId);
      if (owner === undefined) {
        if (elsewhere.has(candidate.orderId)) continue;
        let metadata: OrderMetadata;
        try {
          ({ metadata } = await this.getMetadata({ orderId: candidate.orderId }));
        } catch (error) {
          // Gone between the list and this read (cancelled, expired): not ours to resume.
          if (error instanceof ImagingClientError && error.code === 'not_found') continue;
          throw error;
        }
        owner = typeof metadata.correlation_id === 'string' ? metadata.correlation_id : '';
        // An order created without a correlation id is remembered as nobody's.
        this.correlationOf.set(candidate.orderId, owner);
      }
      if (owner === correlationId) {
        found.push(candidate.orderId);
        if (firstOnly) break;
      }
    }
    return found;
  }

  /** `PATCH /add-metadata`: API values overwrite DICOM tags and sidecar (contract). */
  async addMetadata(
    ref: OrderRef,
    metadata: OrderMetadata,
  ): Promise<{ orderId: string; metadata: OrderMetadata }> {
    const parsed = await this.http.call({
      operation: 'add-metadata',
      method: 'PATCH',
      path: '/add-metadata',
      query: refQuery(ref),
      json: metadata,
      auth: 'bearer',
      orderId: refOrderId(ref),
      parse: (r) => parseJson('add-metadata', r, metadataSchema),
    });
    return { orderId: parsed.order_id, metadata: parsed.metadata };
  }

  /** `GET /metadata`: all metadata of the order. */
  async getMetadata(ref: OrderRef): Promise<{ orderId: string; metadata: OrderMetadata }> {
    const parsed = await this.http.call({
      operation: 'metadata',
      method: 'GET',
      path: '/metadata',
      query: refQuery(ref),
      auth: 'bearer',
      orderId: refOrderId(ref),
      parse: (r) => parseJson('metadata', r, metadataSchema),
    });
    return { orderId: parsed.order_id, metadata: parsed.metadata };
  }

  /** `GET /status`. */
  async getStatus(ref: OrderRef): Promise<OrderSummary> {
    const parsed = await this.http.call({
      operation: 'status',
      method: 'GET',
      path: '/status',
      query: refQuery(ref),
      auth: 'bearer',
      orderId: refOrderId(ref),
      parse: (r) => parseJson('status', r, statusSchema),
    });
    return {
      orderId: parsed.order_id,
      studyUid: parsed.study_uid,
      status: parsed.status,
      updatedAt: parsed.updated_at,
    };
  }

  /**
   * `GET /list-orders`: the caller's active orders, every page (list-pages.ts). Entries with a
   * status value the contract does not name are left out (see `listActiveOrders`), so one odd
   * entry never fails the poller or the duplicate lookup.
   */
  async listOrders(): Promise<OrderSummary[]> {
    return (await this.listActiveOrders()).orders;
  }

  /** `GET /list-orders`, with the entries whose status is unknown named apart. */
  async listActiveOrders(): Promise<ActiveOrders> {
    const { items: entries, pages } = await this.readList(
      'list-orders',
      '/list-orders',
      {},
      (r) => {
        const body = parseJson('list-orders', r, listOrdersSchema);
        return { items: body.orders, body };
      },
    );
    const orders: OrderSummary[] = [];
    const unknownStatus: UnknownStatusEntry[] = [];
    for (const o of entries) {
      if (!KNOWN_STATUSES.has(o.status)) {
        unknownStatus.push({
          orderId: o.order_id,
          status: o.status.replace(/[^A-Za-z0-9_.-]/g, '?').slice(0, 64),
        });
        continue;
      }
      orders.push({
        orderId: o.order_id,
        studyUid: o.study_uid,
        status: o.status as UpstreamStatus,
        createdAt: o.created_at,
        updatedAt: o.updated_at,
        batchId: o.batch_id,
      });
    }
    if (unknownStatus.length > 0) {
      this.deps.logger.warn(
        { unknownStatus: unknownStatus.slice(0, 20), count: unknownStatus.length },
        'GET /list-orders named a status the contract does not know; those orders are left as they were',
      );
    }
    return { orders, unknownStatus, pages };
  }

  /** Every page of a list endpoint, bounded (MAX_LIST_PAGES), only within IMAGING_BASE_URL. */
  private async readList<T>(
    operation: string,
    path: string,
    query: Record<string, string>,
    parse: (r: UpstreamResponse) => { items: T[]; body: Record<string, unknown> },
  ): Promise<{ items: T[]; pages: number }> {
    this.peer ??= new PeerBase('upstream', this.config.baseUrl);
    return readAllPages<T>({ path, query }, operation, this.peer, (page: PageRequest) =>
      this.http.call({
        operation,
        method: 'GET',
        // The rate-limit key stays the endpoint's, whatever path a next link names.
        path: page.path,
        rateLimitKey: path,
        query: page.query,
        auth: 'bearer',
        parse,
      }),
    );
  }

  /** `PATCH /cancel-order`: permanent. 409 (`conflict`) when the order is already terminal. */
  async cancelOrder(orderId: string): Promise<{ orderId: string; status: string }> {
    const parsed = await this.http.call({
      operation: 'cancel-order',
      method: 'PATCH',
      path: '/cancel-order',
      query: { order_id: orderId },
      auth: 'bearer',
      orderId,
      parse: (r) => parseJson('cancel-order', r, cancelSchema),
    });
    return { orderId: parsed.order_id ?? orderId, status: parsed.status ?? 'CANCELLED' };
  }

  // ---- Uploads (the StudyUploader drives these) ----

  /** `GET /upload/single-put`: one presigned write-only URL, for studies under 5 MB. */
  async getSinglePutUrl(orderId: string): Promise<PresignedUrl> {
    const parsed = await this.http.call({
      operation: 'single-put-url',
      method: 'GET',
      path: '/upload/single-put',
      query: { order_id: orderId },
      auth: 'bearer',
      orderId,
      parse: (r) => parseJson('single-put-url', r, presignedUrlSchema),
    });
    return { url: parsed.url, expiresAt: parseTime(parsed.expires_at) };
  }

  /** `POST /upload/multipart/initiate`. */
  async initiateMultipart(orderId: string, sizeBytes: number): Promise<{ uploadId: string }> {
    const parsed = await this.http.call({
      operation: 'multipart-initiate',
      method: 'POST',
      path: '/upload/multipart/initiate',
      json: { order_id: orderId, size_bytes: sizeBytes },
      auth: 'bearer',
      orderId,
      parse: (r) => parseJson('multipart-initiate', r, initiateSchema),
    });
    return { uploadId: parsed.upload_id };
  }

  /**
   * `POST /upload/multipart/presigned-urls`: URLs for parts 1..count, or fresh ones for the
   * given part numbers (resume, expiry).
   */
  async getPartUrls(
    uploadId: string,
    parts: { count: number } | { partNumbers: number[] },
    orderId?: string,
  ): Promise<PartUrls> {
    const wanted = 'count' in parts ? range(1, parts.count) : parts.partNumbers;
    const parsed = await this.http.call({
      operation: 'multipart-presigned-urls',
      method: 'POST',
      path: '/upload/multipart/presigned-urls',
      json:
        'count' in parts
          ? { upload_id: uploadId, parts: parts.count }
          : { upload_id: uploadId, part_numbers: parts.partNumbers },
      auth: 'bearer',
      orderId,
      parse: (r) => parseJson('multipart-presigned-urls', r, partUrlsSchema),
    });
    const urls = new Map(parsed.urls.map((u) => [u.part_number, u.url]));
    const missing = wanted.filter((n) => !urls.has(n));
    if (missing.length) {
      throw new ImagingClientError(
        'invalid_response',
        'multipart-presigned-urls',
        `no URL for part(s) ${missing.slice(0, 10).join(', ')}`,
      );
    }
    return { urls, expiresAt: parseTime(parsed.expires_at) };
  }

  /** `POST /upload/multipart/complete`: starts processing. */
  async completeMultipart(uploadId: string, parts: UploadedPart[], orderId?: string) {
    const sorted = [...parts].sort((a, b) => a.partNumber - b.partNumber);
    return this.http.call({
      operation: 'multipart-complete',
      method: 'POST',
      path: '/upload/multipart/complete',
      json: {
        upload_id: uploadId,
        parts: sorted.map((p) => ({ part_number: p.partNumber, etag: p.etag })),
      },
      auth: 'bearer',
      orderId,
      parse: (r) => parseJson('multipart-complete', r, completeSchema),
    });
  }

  /** `POST /upload/multipart/abort`. */
  async abortMultipart(uploadId: string, orderId?: string) {
    return this.http.call({
      operation: 'multipart-abort',
      method: 'POST',
      path: '/upload/multipart/abort',
      json: { upload_id: uploadId },
      auth: 'bearer',
      orderId,
      parse: (r) => parseJson('multipart-abort', r, abortSchema),
    });
  }

  // ---- Reports and QC ----

  /** `GET /results`. */
  getResults(ref: OrderRef, reportType: ReportType): Promise<UpstreamDocument> {
    return this.document(
      'results',
      '/results',
      { ...refQuery(ref), report_type: reportType },
      refOrderId(ref),
    );
  }

  /** `GET /failure-report`: 404 (`not_found`) when the order has none (QC rejections never do). */
  getFailureReport(ref: OrderRef, reportType: FailureReportType): Promise<UpstreamDocument> {
    return this.document(
      'failure-report',
      '/failure-report',
      { ...refQuery(ref), report_type: reportType },
      refOrderId(ref),
    );
  }

  /** `GET /report`: the aggregated report of a batch (`study_group` = batch id). */
  getBatchReport(batchId: string, reportType: ReportType): Promise<UpstreamDocument> {
    return this.document('report', '/report', { study_group: batchId, report_type: reportType });
  }

  /** `GET /qc-report`: JSON findings, with the round actually returned (header `X-QC-Round`). */
  async getQcReport(
    orderId: string,
    reportType: QcReportType,
    round: QcRound = 'latest',
  ): Promise<{ round: QcRound; report: unknown }> {
    return this.http.call({
      operation: 'qc-report',
      method: 'GET',
      path: '/qc-report',
      query: { order_id: orderId, report_type: reportType, round },
      auth: 'bearer',
      orderId,
      parse: (r) => {
        const header = headerValue(r.headers, QC_ROUND_HEADER)?.trim().toLowerCase();
        if (!header || !(QC_ROUNDS as readonly string[]).includes(header)) {
          throw new ImagingClientError(
            'invalid_response',
            'qc-report',
            `missing or unknown ${QC_ROUND_HEADER} header`,
            {
              status: r.status,
            },
          );
        }
        let report: unknown;
        try {
          report = JSON.parse(r.body.toString('utf8'));
        } catch {
          throw new ImagingClientError('invalid_response', 'qc-report', 'QC report is not JSON', {
            status: r.status,
          });
        }
        return { round: header as QcRound, report };
      },
    });
  }

  /** `PATCH /qc-bypass`: records (or, with `withdraw`, withdraws) a QC bypass request. */
  async requestQcBypass(orderId: string, options: { reason?: string; withdraw?: boolean } = {}) {
    const body: Record<string, unknown> = {};
    if (options.reason !== undefined) body.reason = options.reason;
    if (options.withdraw) body.withdraw = true;
    const parsed = await this.http.call({
      operation: 'qc-bypass',
      method: 'PATCH',
      path: '/qc-bypass',
      query: { order_id: orderId },
      json: body,
      auth: 'bearer',
      orderId,
      parse: (r) => parseJson('qc-bypass', r, qcBypassSchema),
    });
    return { orderId: parsed.order_id ?? orderId, bypassRequested: parsed.bypass_requested };
  }

  // ---- Batches ----

  /** `POST /new-batch`. The batch id is the only way to its aggregated report: keep it. */
  async createBatch(products: string[]): Promise<{ batchId: string }> {
    const parsed = await this.http.call({
      operation: 'new-batch',
      method: 'POST',
      path: '/new-batch',
      json: { products },
      auth: 'bearer',
      parse: (r) => parseJson('new-batch', r, batchSchema),
    });
    return { batchId: parsed.batch_id };
  }

  /** `PATCH /associate-order-to-batch`: 409 `conflict` on a products-list mismatch. */
  async associateOrderToBatch(orderId: string, batchId: string) {
    const parsed = await this.http.call({
      operation: 'associate-order-to-batch',
      method: 'PATCH',
      path: '/associate-order-to-batch',
      query: { order_id: orderId, batch_id: batchId },
      auth: 'bearer',
      orderId,
      parse: (r) => parseJson('associate-order-to-batch', r, associateSchema),
    });
    return { orderId: parsed.order_id ?? orderId, batchId: parsed.batch_id ?? batchId };
  }

  // ---- Catalogue and activity ----

  /** `GET /products`: `UDI` and `fda_desc` are null when unassigned. */
  async getProducts() {
    const parsed = await this.http.call({
      operation: 'products',
      method: 'GET',
      path: '/products',
      auth: 'bearer',
      parse: (r) => parseJson('products', r, productsSchema),
    });
    return parsed.products;
  }

  /** `GET /recent-activity` (camelCase keys since 1.0.7). */
  async getRecentActivity() {
    const parsed = await this.http.call({
      operation: 'recent-activity',
      method: 'GET',
      path: '/recent-activity',
      auth: 'bearer',
      parse: (r) => parseJson('recent-activity', r, recentActivitySchema),
    });
    return parsed.activity;
  }

  // ---- Organization report polling ----

  /** `GET /reports`: reports of the organization not yet retrieved, every page. */
  async pollReports() {
    return (await this.pollReportPages()).reports;
  }

  /** `GET /reports` with the number of pages read (one call each). */
  async pollReportPages() {
    const { items, pages } = await this.readList(
      'reports-poll',
      '/reports',
      { organizationId: this.config.organizationId },
      (r) => {
        const body = parseJson('reports-poll', r, reportsPollSchema);
        return { items: body.reports, body };
      },
    );
    return { reports: items, pages };
  }

  /** `POST /reports`: marks reports received. Acknowledging twice is harmless, so it is retried. */
  async acknowledgeReports(reportIds: string[]): Promise<{ acknowledged: number }> {
    return this.http.call({
      operation: 'reports-ack',
      method: 'POST',
      path: '/reports',
      query: { organizationId: this.config.organizationId },
      json: { report_ids: reportIds },
      auth: 'bearer',
      parse: (r) => parseJson('reports-ack', r, reportsAckSchema),
    });
  }

  // ---- Agent ----

  /** `POST /agent/reports`: QC and failure reports from a registered Agent. */
  async sendAgentReports(
    agentId: string,
    reports: Array<{ orderId: string; kind: 'qc' | 'failure'; round?: QcRound; content: unknown }>,
  ) {
    return this.http.call({
      operation: 'agent-reports',
      method: 'POST',
      path: '/agent/reports',
      json: {
        agent_id: agentId,
        reports: reports.map((r) => ({
          order_id: r.orderId,
          kind: r.kind,
          ...(r.round ? { round: r.round } : {}),
          content: r.content,
        })),
      },
      auth: 'bearer',
      parse: (r) => parseJson('agent-reports', r, agentReportsSchema),
    });
  }

  /** `POST /agent/heartbeat` (path assumed): answers pending QC bypass requests (contract, Rules 2). */
  async agentHeartbeat(agentId: string) {
    const parsed = await this.http.call({
      operation: 'agent-heartbeat',
      method: 'POST',
      path: '/agent/heartbeat',
      json: { agent_id: agentId },
      auth: 'bearer',
      parse: (r) => parseJson('agent-heartbeat', r, heartbeatSchema),
    });
    return parsed.pending_qc_bypass_requests;
  }

  private document(
    operation: string,
    path: string,
    query: CallSpec<unknown>['query'],
    orderId?: string,
  ): Promise<UpstreamDocument> {
    return this.http.call({
      operation,
      method: 'GET',
      path,
      query,
      auth: 'bearer',
      orderId,
      parse: (r: UpstreamResponse) => {
        if (r.body.length === 0) {
          throw new ImagingClientError('invalid_response', operation, 'empty document', {
            status: r.status,
          });
        }
        return {
          contentType: headerValue(r.headers, 'content-type') ?? 'application/octet-stream',
          body: r.body,
        };
      },
    });
  }
}

function refQuery(ref: OrderRef): Record<string, string> {
  return 'orderId' in ref ? { order_id: ref.orderId } : { study_uid: ref.studyUid };
}

function refOrderId(ref: OrderRef): string | undefined {
  return 'orderId' in ref ? ref.orderId : undefined;
}

function parseTime(value: string | undefined): number | undefined {
  if (!value) return undefined;
  const ms = Date.parse(value);
  return Number.isNaN(ms) ? undefined : ms;
}

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}
