import { PeerBase } from '../common/peer-url';
import type {
  FailureReportType,
  QcReportType,
  QcRound,
  ReportType,
  TokenResponse,
} from '../imaging-spec/imaging-spec';
import { readQcReport } from './document-answers';
import type { ImagingClientConfig } from './imaging-client.config';
import type {
  ActiveOrders,
  CreatedOrder,
  CreateOrderOptions,
  ImagingClientDeps,
  OrderMetadata,
  OrderRef,
  OrderSummary,
  UpstreamDocument,
} from './imaging-client.types';
import { printable, splitByKnownStatus } from './listed-orders';
import { ImagingClientError } from './imaging-client.error';
import { OrderCreation } from './order-creation';
import { TokenProvider } from './token-provider';
import { UploadEndpoints } from './upload-endpoints';
import { UpstreamHttp, type RetirementState } from './upstream-http';
import {
  listOrdersSchema,
  parseJson,
  parseListJson,
  reportsPollSchema,
  sameUpstreamOrderId,
  tokenSchema,
} from './upstream-schemas';
import { byOrder, byRef, callDocument, callJson, readList } from './upstream-calls';

export * from './imaging-client.types';

/**
 * The typed client of the Imaging Analysis Service /v1: one method per current operation
 * of the contract. Payload details the contract leaves open follow
 * docs/upstream-assumptions.md.
 */
export class ImagingClient {
  readonly http: UpstreamHttp;
  /** The upload endpoints the StudyUploader drives (upload-endpoints.ts). */
  readonly uploads: UploadEndpoints;
  private readonly tokens: TokenProvider;
  private readonly creation: OrderCreation;
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
    this.creation = new OrderCreation(this.http, this, config, deps);
    this.uploads = new UploadEndpoints(this.http);
  }

  /** Set once the upstream answered 410: every later call fails fast without a request. */
  get retired(): RetirementState | undefined {
    return this.http.retired;
  }

  /** IMAGING_BASE_URL as the one peer a next-page link may point into. */
  private get base(): PeerBase {
    return (this.peer ??= new PeerBase('upstream', this.config.baseUrl));
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
    return callJson(this.http, 'test-token');
  }

  // ---- Orders and metadata ----

  /**
   * `POST /new-order`. Creating is not idempotent upstream, so after any failure that may
   * have created the order anyway (timeout, dropped connection, 5xx) the client first looks
   * for an order carrying our `correlation_id` and returns it instead of creating another
   * (order-creation.ts).
   */
  createOrder(metadata: OrderMetadata, options: CreateOrderOptions): Promise<CreatedOrder> {
    return this.creation.create(metadata, options);
  }

  /** The active (PENDING) order created with our `correlation_id`, the oldest if several. */
  findOrderByCorrelationId(
    correlationId: string,
    createdSince?: number,
    knownElsewhere?: CreateOrderOptions['knownElsewhere'],
  ): Promise<string | undefined> {
    return this.creation.findFirst(correlationId, createdSince, knownElsewhere);
  }

  /** `PATCH /add-metadata`: API values overwrite DICOM tags and sidecar (contract). */
  async addMetadata(
    ref: OrderRef,
    metadata: OrderMetadata,
  ): Promise<{ orderId: string; metadata: OrderMetadata }> {
    const parsed = await callJson(this.http, 'add-metadata', {
      ...byRef(ref),
      json: metadata,
    });
    return { orderId: parsed.order_id, metadata: parsed.metadata };
  }

  /** `GET /metadata`: all metadata of the order. */
  async getMetadata(ref: OrderRef): Promise<{ orderId: string; metadata: OrderMetadata }> {
    const parsed = await callJson(this.http, 'metadata', byRef(ref));
    return { orderId: parsed.order_id, metadata: parsed.metadata };
  }

  /** `GET /status`. */
  async getStatus(ref: OrderRef): Promise<OrderSummary> {
    const parsed = await callJson(this.http, 'status', byRef(ref));
    // The status of another order is no answer about this one (an upstream cache or routing
    // mix-up): taken as it stands, it would end this order with another patient's outcome.
    if ('orderId' in ref && !sameUpstreamOrderId(parsed.order_id, ref.orderId)) {
      throw new ImagingClientError(
        'invalid_response',
        'status',
        `the answer is about another order (order_id ${printable(parsed.order_id)}), not the one asked for`,
        { status: 200 },
      );
    }
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
    const list = { operation: 'list-orders', path: '/list-orders', query: {} };
    const { items, pages } = await readList(this.http, this.base, list, (r, alreadyRead) => {
      const body = parseListJson('list-orders', r, listOrdersSchema, 'orders', alreadyRead);
      return { items: body.orders, body };
    });
    const { orders, unknownStatus } = splitByKnownStatus(items);
    if (unknownStatus.length > 0) {
      this.deps.logger.warn(
        { unknownStatus: unknownStatus.slice(0, 20), count: unknownStatus.length },
        'GET /list-orders named a status the contract does not know; those orders are left as they were',
      );
    }
    return { orders, unknownStatus, pages };
  }

  /** `PATCH /cancel-order`: permanent. 409 (`conflict`) when the order is already terminal. */
  async cancelOrder(orderId: string): Promise<{ orderId: string; status: string }> {
    const parsed = await callJson(this.http, 'cancel-order', byOrder(orderId));
    // The answer says which order is now in which status: one about another order, or naming
    // a status other than CANCELLED, does not say this order was cancelled (contract,
    // Transitions: cancel → CANCELLED), and taken as it stands the order would be recorded
    // cancelled upstream while the upstream goes on with it.
    if (parsed.order_id !== undefined && !sameUpstreamOrderId(parsed.order_id, orderId)) {
      throw new ImagingClientError(
        'invalid_response',
        'cancel-order',
        `the answer is about another order (order_id ${printable(parsed.order_id)}), not the one asked for`,
        { status: 200 },
      );
    }
    if (parsed.status !== undefined && parsed.status !== 'CANCELLED') {
      throw new ImagingClientError(
        'invalid_response',
        'cancel-order',
        `the answer names status ${printable(parsed.status)}, not CANCELLED`,
        { status: 200 },
      );
    }
    return { orderId, status: 'CANCELLED' };
  }

  // ---- Reports and QC ----

  /** `GET /results`. */
  getResults(ref: OrderRef, reportType: ReportType): Promise<UpstreamDocument> {
    return callDocument(this.http, 'results', '/results', byRef(ref, { report_type: reportType }));
  }

  /** `GET /failure-report`: 404 (`not_found`) when the order has none (QC rejections never do). */
  getFailureReport(ref: OrderRef, reportType: FailureReportType): Promise<UpstreamDocument> {
    return callDocument(
      this.http,
      'failure-report',
      '/failure-report',
      byRef(ref, { report_type: reportType }),
    );
  }

  /** `GET /report`: the aggregated report of a batch (`study_group` = batch id). */
  getBatchReport(batchId: string, reportType: ReportType): Promise<UpstreamDocument> {
    return callDocument(this.http, 'report', '/report', {
      query: { study_group: batchId, report_type: reportType },
    });
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
      parse: readQcReport,
    });
  }

  /** `PATCH /qc-bypass`: records (or, with `withdraw`, withdraws) a QC bypass request. */
  async requestQcBypass(orderId: string, options: { reason?: string; withdraw?: boolean } = {}) {
    const json: Record<string, unknown> = {};
    if (options.reason !== undefined) json.reason = options.reason;
    if (options.withdraw) json.withdraw = true;
    const parsed = await callJson(this.http, 'qc-bypass', { ...byOrder(orderId), json });
    return { orderId: parsed.order_id ?? orderId, bypassRequested: parsed.bypass_requested };
  }

  // ---- Batches ----

  /** `POST /new-batch`. The batch id is the only way to its aggregated report: keep it. */
  async createBatch(products: string[]): Promise<{ batchId: string }> {
    const parsed = await callJson(this.http, 'new-batch', { json: { products } });
    return { batchId: parsed.batch_id };
  }

  /** `PATCH /associate-order-to-batch`: 409 `conflict` on a products-list mismatch. */
  async associateOrderToBatch(orderId: string, batchId: string) {
    const parsed = await callJson(this.http, 'associate-order-to-batch', {
      query: { order_id: orderId, batch_id: batchId },
      orderId,
    });
    return { orderId: parsed.order_id ?? orderId, batchId: parsed.batch_id ?? batchId };
  }

  // ---- Catalogue and activity ----

  /** `GET /products`: `UDI` and `fda_desc` are null when unassigned. */
  async getProducts() {
    return (await callJson(this.http, 'products')).products;
  }

  /** `GET /recent-activity` (camelCase keys since 1.0.7). */
  async getRecentActivity() {
    return (await callJson(this.http, 'recent-activity')).activity;
  }

  // ---- Organization report polling ----

  /** `GET /reports`: reports of the organization not yet retrieved, every page. */
  async pollReports() {
    return (await this.pollReportPages()).reports;
  }

  /** `GET /reports` with the number of pages read (one call each). */
  async pollReportPages() {
    const list = {
      operation: 'reports-poll',
      path: '/reports',
      query: { organizationId: this.config.organizationId },
    };
    const { items, pages } = await readList(this.http, this.base, list, (r, alreadyRead) => {
      const body = parseListJson('reports-poll', r, reportsPollSchema, 'reports', alreadyRead);
      return { items: body.reports, body };
    });
    return { reports: items, pages };
  }

  /** `POST /reports`: marks reports received. Acknowledging twice is harmless, so it is retried. */
  async acknowledgeReports(reportIds: string[]): Promise<{ acknowledged: number }> {
    return callJson(this.http, 'reports-ack', {
      query: { organizationId: this.config.organizationId },
      json: { report_ids: reportIds },
    });
  }

  // ---- Agent ----

  /** `POST /agent/reports`: QC and failure reports from a registered Agent. */
  async sendAgentReports(
    agentId: string,
    reports: Array<{ orderId: string; kind: 'qc' | 'failure'; round?: QcRound; content: unknown }>,
  ) {
    const json = {
      agent_id: agentId,
      reports: reports.map((r) => ({
        order_id: r.orderId,
        kind: r.kind,
        ...(r.round ? { round: r.round } : {}),
        content: r.content,
      })),
    };
    return callJson(this.http, 'agent-reports', { json });
  }

  /** `POST /agent/heartbeat` (path assumed): answers pending QC bypass requests (contract, Rules 2). */
  async agentHeartbeat(agentId: string) {
    const parsed = await callJson(this.http, 'agent-heartbeat', { json: { agent_id: agentId } });
    return parsed.pending_qc_bypass_requests;
  }
}
