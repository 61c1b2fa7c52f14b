import { Body, Get, Inject, Param, Query, Req, Res } from '@nestjs/common';
import type { Response } from 'express';
import type { AuthenticatedRequest } from '../auth/bearer-auth.guard';
import { APP_CONFIG } from '../common/tokens';
import type { AppConfig } from '../config/app-config';
import { ORDER_STATES } from '../domain/order-state';
import { outboundSettings } from '../outbound/outbound.settings';
import { refuseRevealInUrl, resolveReveal } from './audit-api.reveal';
import { deadLetterPageSchema, orderSearchSchema, toOrderSearch } from './audit-api.dto';
import { AuditPage, FormPost, RecordPages, renderPage, searchPage } from './audit-page.shared';
import type { DetailPageRequest, PageRequest } from './audit-page.shared';
import {
  documentPage,
  orderListPage,
  orderOutboundPage,
  orderPage,
  outboundDocumentPage,
} from './audit-page.views';
import {
  presentOrder,
  presentOrderDetail,
  presentOutboundItem,
  presentOutboundWhole,
  prettyJson,
  rawView,
  type RawView,
  waitingOf,
} from './audit-presenter';
import { AuditQueryService, type MessageRow, ORDER_SOURCES } from './audit-query.service';
import { AUDIT_QUERY } from './audit.tokens';
import { maskUpstreamReport } from './phi-masking';
import { oneRawViewAtATime } from './raw-view.gate';

/** How many inbound messages an order page shows raw (the rest are linked). */
const RAW_MESSAGES_ON_ORDER_PAGE = 5;

/**
 * The order list (also what /audit shows for a query with filters: links and bookmarks from
 * before the dashboard), PHI masked.
 */
export async function sendOrderList(
  query: AuditQueryService,
  upstreamStuckHours: number,
  q: Record<string, unknown>,
  req: AuthenticatedRequest,
  res: Response,
): Promise<void> {
  const { filters, found, problem } = await searchPage(q, orderSearchSchema, async (input) => {
    const search = toOrderSearch(input);
    const page = await query.searchOrders(search);
    const messages = search.messageControlId
      ? (await query.searchMessages({ messageControlId: search.messageControlId })).items
      : undefined;
    return { ...page, messages };
  });
  const orders = (found?.items ?? []).map((o) => ({
    ...presentOrder(o, false),
    waiting: waitingOf(o, upstreamStuckHours),
  }));
  renderPage(req, res, (ctx) =>
    orderListPage(ctx, {
      filters,
      orders,
      nextCursor: found?.nextCursor,
      lateCommits: found?.lateCommits,
      moreLateCommits: found?.moreLateCommits,
      messages: found?.messages,
      problem,
      states: ORDER_STATES,
      sources: ORDER_SOURCES,
    }),
  );
}

/** The audit page's orders: the list, one order's whole path, and the upstream's reports. */
@AuditPage()
export class AuditOrdersPageController extends RecordPages('orders') {
  @Inject(AUDIT_QUERY) private readonly query!: AuditQueryService;
  @Inject(APP_CONFIG) private readonly config!: AppConfig;

  protected override async renderList({ req, res, query }: PageRequest): Promise<void> {
    await sendOrderList(this.query, this.config.UPSTREAM_STUCK_HOURS, query, req, res);
  }

  /** One order's whole path (GET and reveal: RecordPages). */
  protected override async renderDetail({ id, req, res, form }: DetailPageRequest): Promise<void> {
    const detail = await this.query.orderDetail(id);
    const reveal = await resolveReveal(this.query, req, form, { orderId: id, what: 'order page' });
    const view = presentOrderDetail(detail, reveal, this.config.UPSTREAM_STUCK_HOURS);
    const raws: Array<{ message: MessageRow; raw: RawView }> = [];
    for (const m of detail.messages.slice(-RAW_MESSAGES_ON_ORDER_PAGE)) {
      raws.push({
        message: m,
        raw: await oneRawViewAtATime(async () => {
          const { message } = await this.query.message(m.id);
          return rawView(message.raw, message.contentType, reveal);
        }),
      });
    }
    const documents = await this.query.orderDocuments(id);
    const destinations = outboundSettings(this.config).destinations;
    renderPage(req, res, (ctx) => orderPage(ctx, view, raws, destinations, documents));
  }

  /** The order's outbound documents older than the order page's, a page at a time. */
  @Get('orders/:id/outbound')
  async outbound(
    @Param('id') id: string,
    @Query() q: Record<string, unknown>,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    const { found, problem } = await searchPage(q, deadLetterPageSchema, (paging) =>
      this.query.orderOutbound(id, paging),
    );
    renderPage(req, res, (ctx) =>
      orderOutboundPage(
        ctx,
        { id },
        {
          items: (found?.items ?? []).map((r) => presentOutboundItem(r, false)),
          total: found?.total ?? 0,
          nextCursor: found?.nextCursor,
          problem,
        },
      ),
    );
  }

  /** One outbound document alone (its bodies cut in the lists). */
  @Get('outbound/:id')
  async outboundDocument(
    @Param('id') id: string,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    const row = await this.query.outboxEntry(id);
    renderPage(req, res, (ctx) => outboundDocumentPage(ctx, presentOutboundWhole(row, false)));
  }

  /**
   * One report of the upstream (results, failure, QC) stored for the order. JSON is shown
   * (and downloaded) masked; the original bytes (a PDF cannot be masked) only for an admin
   * who gives a reason, recorded as `phi.reveal` before anything is sent.
   */
  @Get('orders/:id/documents/:docId')
  async document(
    @Param('id') id: string,
    @Param('docId') docId: string,
    @Query() q: Record<string, unknown>,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    refuseRevealInUrl(q, `/audit/orders/${id}/documents/${docId}`);
    await this.sendDocument(id, docId, q, req, res, undefined);
  }

  /** The original file, for an admin: the reason is in the form body (with the CSRF token). */
  @FormPost('orders/:id/documents/:docId')
  async revealDocument(
    @Param('id') id: string,
    @Param('docId') docId: string,
    @Body() body: Record<string, unknown> | undefined,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    await this.sendDocument(id, docId, {}, req, res, body);
  }

  private async sendDocument(
    id: string,
    docId: string,
    q: Record<string, unknown>,
    req: AuthenticatedRequest,
    res: Response,
    body: Record<string, unknown> | undefined,
  ): Promise<void> {
    const doc = await this.query.orderDocument(id, docId);
    const name = `${doc.kind}-report-${doc.upstreamStatus.toLowerCase()}-${doc.id}`;
    const reveal = await resolveReveal(this.query, req, body, {
      orderId: id,
      what: `${doc.kind} report ${doc.reportType} (${doc.id})`,
    });
    const isJson = doc.contentType.includes('json');
    if (reveal) {
      const extension = isJson ? 'json' : doc.reportType.toLowerCase();
      sendDownload(
        res,
        `${name}.${extension}`,
        isJson ? 'application/json' : doc.contentType,
        doc.body,
      );
      return;
    }
    let masked: string | undefined;
    if (isJson) {
      try {
        masked = prettyJson(maskUpstreamReport(JSON.parse(doc.body.toString('utf8'))));
      } catch {
        masked = '(not valid JSON; hidden while masked)';
      }
    }
    if (q.download === '1' && masked !== undefined) {
      sendDownload(res, `${name}.masked.json`, 'application/json', masked);
      return;
    }
    renderPage(req, res, (ctx) => documentPage(ctx, id, doc, masked));
  }
}

/** A report as a file to save: never cached, never sniffed. */
function sendDownload(res: Response, filename: string, type: string, body: Buffer | string): void {
  res.setHeader('Cache-Control', 'no-store');
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('Content-Disposition', `attachment; filename="${filename}"`);
  res.status(200).type(type).send(body);
}
