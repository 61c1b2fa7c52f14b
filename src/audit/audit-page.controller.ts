import {
  Body,
  Controller,
  Get,
  Inject,
  Param,
  Post,
  Query,
  Req,
  Res,
  UseFilters,
} from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import type { Response } from 'express';
import {
  AUDIT_SESSION_COOKIE,
  AUDIT_SESSION_PATH,
  AUDIT_SESSION_TTL_SECONDS,
  AuditSessionStore,
  csrfMatches,
  readCookie,
} from '../auth/audit-session.store';
import { AllowSessionCookie, Roles, SignIn } from '../auth/auth.decorators';
import type { AuthenticatedRequest } from '../auth/bearer-auth.guard';
import { AppError } from '../common/app-error';
import { APP_CONFIG } from '../common/tokens';
import type { AppConfig } from '../config/app-config';
import { ORDER_STATES } from '../domain/order-state';
import type { UpstreamHealthSnapshot, UpstreamProbe } from '../domain/upstream-probe.port';
import { UPSTREAM_PROBE } from '../health/health.tokens';
import { outboundSettings } from '../outbound/outbound.settings';
import { refuseRevealInUrl, resolveReveal } from './audit-api.controller';
import {
  messageBrowseSchema,
  orderSearchSchema,
  parseInput,
  replaySchema,
  toOrderSearch,
} from './audit-api.dto';
import { newNonce, sendPage, AuditPageFilter } from './audit-page.filter';
import { maskUpstreamReport } from './phi-masking';
import {
  dashboardPage,
  dryRunPage,
  deadLettersPage,
  documentPage,
  mappingsPage,
  messageListPage,
  messagePage,
  orderListPage,
  orderPage,
  type PageContext,
  replayConfirmPage,
  signInPage,
} from './audit-page.views';
import {
  presentMessage,
  presentOrder,
  presentOrderDetail,
  presentOutbox,
  rawView,
  type Waiting,
  waitingOf,
} from './audit-presenter';
import {
  AuditQueryService,
  type MessageRow,
  ORDER_SOURCES,
  type OrderRow,
} from './audit-query.service';
import { AUDIT_QUERY, AUDIT_SESSIONS, MESSAGE_REPROCESSOR } from './audit.tokens';
import type { MessageReprocessor } from './audit-api.reprocess';
import { activeMappingTables } from './mapping-tables.view';
import { dryRun } from './audit-api.dry-run';

/** How many inbound messages an order page shows raw (the rest are linked). */
const RAW_MESSAGES_ON_ORDER_PAGE = 5;

/**
 * The audit web page at /audit: server-rendered HTML, no script, no external request. A
 * browser signs in with its API token once (POST /audit/session) and then uses an
 * HttpOnly, SameSite=Strict session cookie scoped to /audit; POST forms also carry the
 * session's CSRF token.
 */
@ApiExcludeController()
@UseFilters(AuditPageFilter)
@AllowSessionCookie()
@Roles('analyst')
@Controller('audit')
export class AuditPageController {
  constructor(
    @Inject(AUDIT_QUERY) private readonly query: AuditQueryService,
    @Inject(AUDIT_SESSIONS) private readonly sessions: AuditSessionStore,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(UPSTREAM_PROBE) private readonly upstream: UpstreamProbe,
    @Inject(MESSAGE_REPROCESSOR) private readonly reprocessor: MessageReprocessor,
  ) {}

  /**
   * The dashboard; with any filter in the query (links and bookmarks from before the
   * dashboard), the order list.
   */
  @Get()
  async home(
    @Query() q: Record<string, unknown>,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    if (Object.keys(q).length > 0) return this.orders(q, req, res);
    const ctx = context(req);
    const [data, upstream] = await Promise.all([
      this.query.dashboard(),
      this.upstream.check().catch((error: unknown): UpstreamHealthSnapshot => ({
        status: 'unknown',
        baseUrl: '',
        detail: `not checked: ${(error as Error).name}`,
      })),
    ]);
    sendPage(
      res,
      200,
      dashboardPage(ctx, data, {
        status: upstream.status,
        deprecation: upstream.deprecation,
        migrationGuide: upstream.migrationGuide,
        detail: upstream.detail,
        checkedAt: upstream.checkedAt,
        limits: {
          perEndpointPerMinute: this.config.IMAGING_RATE_LIMIT_PER_ENDPOINT,
          totalPerMinute: this.config.IMAGING_RATE_LIMIT_TOTAL,
        },
      }),
      ctx.nonce,
    );
  }

  @Get('orders')
  async orders(
    @Query() q: Record<string, unknown>,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    const ctx = context(req);
    const filters: Record<string, string> = {};
    for (const [k, v] of Object.entries(q)) if (typeof v === 'string') filters[k] = v.trim();
    let orders: Array<OrderRow & { waiting: Waiting | null }> = [];
    let nextCursor: string | undefined;
    let messages: MessageRow[] | undefined;
    let problem: string | undefined;
    try {
      const search = toOrderSearch(
        parseInput(orderSearchSchema, {
          ...filters,
          from: asUtc(filters.from),
          to: asUtc(filters.to),
        }),
      );
      const page = await this.query.searchOrders(search);
      orders = page.items.map((o) => ({
        ...presentOrder(o, false),
        waiting: waitingOf(o, this.config.UPSTREAM_STUCK_HOURS),
      }));
      nextCursor = page.nextCursor;
      if (search.messageControlId) {
        messages = (await this.query.searchMessages({ messageControlId: search.messageControlId }))
          .items;
      }
    } catch (error) {
      if (!(error instanceof AppError) || error.code !== 'bad_request') throw error;
      problem = error.message;
    }
    const html = orderListPage(ctx, {
      filters,
      orders,
      nextCursor,
      messages,
      problem,
      states: ORDER_STATES,
      sources: ORDER_SOURCES,
    });
    sendPage(res, 200, html, ctx.nonce);
  }

  @Get('orders/:id')
  async order(
    @Param('id') id: string,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    await this.renderOrder(id, req, res, false);
  }

  /** The reveal form's target: the reason is in the form body (with the CSRF token), never in the URL. */
  @Post('orders/:id')
  async revealOrder(
    @Param('id') id: string,
    @Body() body: Record<string, unknown> | undefined,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    requireCsrf(req, body);
    await this.renderOrder(id, req, res, true, body);
  }

  private async renderOrder(
    id: string,
    req: AuthenticatedRequest,
    res: Response,
    post: boolean,
    body?: Record<string, unknown>,
  ): Promise<void> {
    const ctx = context(req);
    const detail = await this.query.orderDetail(id);
    const reveal = post
      ? await resolveReveal(this.query, req, body, { orderId: id, what: 'order page' })
      : false;
    const view = presentOrderDetail(detail, reveal, this.config.UPSTREAM_STUCK_HOURS);
    const raws = [];
    for (const m of detail.messages.slice(-RAW_MESSAGES_ON_ORDER_PAGE)) {
      const { message } = await this.query.message(m.id);
      raws.push({ message: m, raw: rawView(message.raw, message.contentType, reveal) });
    }
    const documents = await this.query.orderDocuments(id);
    sendPage(
      res,
      200,
      orderPage(ctx, view, raws, outboundSettings(this.config).destinations, documents),
      ctx.nonce,
    );
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
  @Post('orders/:id/documents/:docId')
  async revealDocument(
    @Param('id') id: string,
    @Param('docId') docId: string,
    @Body() body: Record<string, unknown> | undefined,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    requireCsrf(req, body);
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
    const ctx = context(req);
    const doc = await this.query.orderDocument(id, docId);
    const name = `${doc.kind}-report-${doc.upstreamStatus.toLowerCase()}-${doc.id}`;
    const reveal = body
      ? await resolveReveal(this.query, req, body, {
          orderId: id,
          what: `${doc.kind} report ${doc.reportType} (${doc.id})`,
        })
      : false;
    const isJson = doc.contentType.includes('json');
    if (reveal) {
      res.setHeader('Cache-Control', 'no-store');
      res.setHeader('X-Content-Type-Options', 'nosniff');
      res.setHeader(
        'Content-Disposition',
        `attachment; filename="${name}.${isJson ? 'json' : doc.reportType.toLowerCase()}"`,
      );
      res
        .status(200)
        .type(isJson ? 'application/json' : doc.contentType)
        .send(doc.body);
      return;
    }
    let masked: string | undefined;
    if (isJson) {
      try {
        masked = JSON.stringify(maskUpstreamReport(JSON.parse(doc.body.toString('utf8'))), null, 2);
      } catch {
        masked = '(not valid JSON; hidden while masked)';
      }
    }
    if (q.download === '1' && masked !== undefined) {
      res.setHeader('Cache-Control', 'no-store');
      res.setHeader('X-Content-Type-Options', 'nosniff');
      res.setHeader('Content-Disposition', `attachment; filename="${name}.masked.json"`);
      res.type('application/json').send(masked);
      return;
    }
    sendPage(res, 200, documentPage(ctx, id, doc, masked), ctx.nonce);
  }

  /** The message browser: every inbound message and request, accepted or refused. */
  @Get('messages')
  async messages(
    @Query() q: Record<string, unknown>,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    const ctx = context(req);
    const filters: Record<string, string> = {};
    for (const [k, v] of Object.entries(q)) if (typeof v === 'string') filters[k] = v.trim();
    let messages: MessageRow[] = [];
    let nextCursor: string | undefined;
    let problem: string | undefined;
    try {
      const { msh10, ...browse } = parseInput(messageBrowseSchema, {
        ...filters,
        from: asUtc(filters.from),
        to: asUtc(filters.to),
      });
      const page = msh10
        ? await this.query.searchMessages({ messageControlId: msh10 })
        : await this.query.browseMessages(browse);
      messages = page.items;
      nextCursor = page.nextCursor;
    } catch (error) {
      if (!(error instanceof AppError) || error.code !== 'bad_request') throw error;
      problem = error.message;
    }
    sendPage(res, 200, messageListPage(ctx, { filters, messages, nextCursor, problem }), ctx.nonce);
  }

  @Get('messages/:id')
  async message(
    @Param('id') id: string,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    await this.renderMessage(id, req, res, false);
  }

  @Post('messages/:id')
  async revealMessage(
    @Param('id') id: string,
    @Body() body: Record<string, unknown> | undefined,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    requireCsrf(req, body);
    await this.renderMessage(id, req, res, true, body);
  }

  /** The reprocess button's target (admin): reason in the form body, with the CSRF token. */
  @Roles('admin')
  @Post('messages/:id/reprocess')
  async reprocessMessage(
    @Param('id') id: string,
    @Body() body: Record<string, unknown> | undefined,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    requireCsrf(req, body);
    const { reason } = parseInput(replaySchema, body ?? {});
    const result = await this.reprocessor.reprocess(id, req.principal!.actor, reason);
    res.redirect(303, `/audit/messages/${encodeURIComponent(result.reprocessedMessageId ?? id)}`);
  }

  private async renderMessage(
    id: string,
    req: AuthenticatedRequest,
    res: Response,
    post: boolean,
    body?: Record<string, unknown>,
  ): Promise<void> {
    const ctx = context(req);
    const { message, events } = await this.query.message(id);
    const reveal = post
      ? await resolveReveal(this.query, req, body, {
          inboundMessageId: id,
          what: 'message page',
        })
      : false;
    const orderIds = [
      ...new Set(events.map((e) => e.orderId).filter((o): o is string => Boolean(o))),
    ];
    sendPage(
      res,
      200,
      messagePage(ctx, presentMessage(message, events, reveal), orderIds),
      ctx.nonce,
    );
  }

  @Get('dead-letters')
  async deadLetters(
    @Query('cursor') cursor: string | undefined,
    @Query('replayed') replayed: string | undefined,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    const ctx = context(req);
    const page = await this.query.deadLetters({ cursor });
    sendPage(
      res,
      200,
      deadLettersPage(ctx, {
        items: page.items.map((r) => presentOutbox(r, false)),
        nextCursor: page.nextCursor,
        replayed: replayed && /^\d{1,18}$/.test(replayed) ? replayed : undefined,
      }),
      ctx.nonce,
    );
  }

  @Roles('admin')
  @Get('dead-letters/:id/replay')
  async confirmReplay(
    @Param('id') id: string,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    const ctx = context(req);
    const row = await this.query.outboxEntry(id);
    sendPage(res, 200, replayConfirmPage(ctx, presentOutbox(row, false)), ctx.nonce);
  }

  @Roles('admin')
  @Post('dead-letters/:id/replay')
  async replay(
    @Param('id') id: string,
    @Body() body: Record<string, unknown> | undefined,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    requireCsrf(req, body);
    const ctx = context(req);
    const row = await this.query.outboxEntry(id);
    const form = body ?? {};
    if (form.confirm !== 'yes') {
      sendPage(
        res,
        400,
        replayConfirmPage(ctx, row, 'Tick the confirmation box to replay.'),
        ctx.nonce,
      );
      return;
    }
    let reason: string;
    try {
      reason = parseInput(replaySchema, form).reason;
    } catch (error) {
      sendPage(res, 400, replayConfirmPage(ctx, row, (error as Error).message), ctx.nonce);
      return;
    }
    await this.query.replayDeadLetter(id, req.principal!.actor, reason);
    res.redirect(303, `/audit/dead-letters?replayed=${encodeURIComponent(id)}`);
  }

  @Get('mappings')
  mappings(@Req() req: AuthenticatedRequest, @Res() res: Response): void {
    const ctx = context(req);
    sendPage(res, 200, mappingsPage(ctx, activeMappingTables(this.config)), ctx.nonce);
  }

  @Get('dry-run')
  dryRunForm(@Req() req: AuthenticatedRequest, @Res() res: Response): void {
    const ctx = context(req);
    sendPage(res, 200, dryRunPage(ctx, { kind: 'hl7', input: '' }), ctx.nonce);
  }

  /** The dry-run form's target: nothing is stored, sent or logged of the pasted input. */
  @Post('dry-run')
  async dryRun(
    @Body() body: Record<string, unknown> | undefined,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    requireCsrf(req, body);
    const ctx = context(req);
    const kind = body?.kind === 'fhir' ? 'fhir' : 'hl7';
    const input = typeof body?.input === 'string' ? body.input : '';
    try {
      const result = await dryRun({ [kind]: input }, this.config);
      sendPage(res, 200, dryRunPage(ctx, { kind, input }, result), ctx.nonce);
    } catch (error) {
      if (!(error instanceof AppError)) throw error;
      sendPage(res, 400, dryRunPage(ctx, { kind, input }, undefined, error.message), ctx.nonce);
    }
  }

  /** The sign-in form's target: trades a valid analyst/admin token for a session cookie. */
  @SignIn()
  @Post('session')
  async signIn(
    @Body() body: Record<string, unknown> | undefined,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    const next = safeNext(body?.next);
    const principal = req.principal;
    if (!principal) {
      const nonce = newNonce();
      if (typeof body?.token !== 'string' || !body.token || !wantsForm(req)) {
        throw new AppError('unauthorized', 'a valid API token is required to sign in');
      }
      res.setHeader('WWW-Authenticate', 'Bearer realm="imaging-ai-adapter"');
      sendPage(res, 401, signInPage({ nonce }, { next, error: 'That token is not valid.' }), nonce);
      return;
    }
    if (principal.role === 'sender') {
      const nonce = newNonce();
      sendPage(
        res,
        403,
        signInPage(
          { nonce },
          { next, error: 'Sender tokens have no access to the audit log; use an analyst token.' },
        ),
        nonce,
      );
      return;
    }
    const { id } = await this.sessions.create(principal.role, principal.actor);
    res.setHeader('Set-Cookie', sessionCookie(id, req, AUDIT_SESSION_TTL_SECONDS));
    res.redirect(303, next);
  }

  @Post('session/sign-out')
  async signOut(
    @Body() body: Record<string, unknown> | undefined,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    requireCsrf(req, body);
    const id = readCookie(req.headers.cookie, AUDIT_SESSION_COOKIE);
    if (id) await this.sessions.delete(id);
    res.setHeader('Set-Cookie', sessionCookie('', req, 0));
    res.redirect(303, '/audit');
  }
}

function context(req: AuthenticatedRequest): PageContext {
  const p = req.principal;
  return { nonce: newNonce(), role: p?.role, actor: p?.actor, csrfToken: p?.session?.csrfToken };
}

/** Cookie-authenticated form posts must echo the session's CSRF token (bearer callers need not). */
function requireCsrf(req: AuthenticatedRequest, body: Record<string, unknown> | undefined): void {
  const session = req.principal?.session;
  if (
    req.principal?.via === 'session' &&
    (!session || !csrfMatches(session.csrfToken, body?._csrf))
  ) {
    throw new AppError(
      'forbidden',
      'the form is stale or was not sent by the audit page; reload it',
    );
  }
}

function sessionCookie(id: string, req: AuthenticatedRequest, maxAge: number): string {
  const secure = req.secure || req.headers['x-forwarded-proto'] === 'https' ? '; Secure' : '';
  return `${AUDIT_SESSION_COOKIE}=${id}; Path=${AUDIT_SESSION_PATH}; HttpOnly; SameSite=Strict; Max-Age=${maxAge}${secure}`;
}

/** Only a path under /audit (no scheme, no host, no `//`): no open redirect. */
function safeNext(value: unknown): string {
  if (typeof value !== 'string') return '/audit';
  return /^\/audit(?:[/?][^\s\\]*)?$/.test(value) &&
    !value.startsWith('//') &&
    !value.includes('//')
    ? value
    : '/audit';
}

function wantsForm(req: AuthenticatedRequest): boolean {
  return (req.headers['content-type'] ?? '').startsWith('application/x-www-form-urlencoded');
}

/** `datetime-local` inputs carry no zone: the page labels them UTC. */
function asUtc(value: string | undefined): string | undefined {
  if (!value) return value;
  return /^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?$/.test(value) ? `${value}Z` : value;
}
