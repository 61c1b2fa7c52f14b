import { Body, Get, Inject, Post, Query, Req, Res } from '@nestjs/common';
import type { Response } from 'express';
import {
  AUDIT_SESSION_COOKIE,
  AUDIT_SESSION_TTL_SECONDS,
  AuditSessionStore,
  readCookie,
} from '../auth/audit-session.store';
import { SignIn } from '../auth/auth.decorators';
import type { AuthenticatedRequest } from '../auth/bearer-auth.guard';
import { AppError } from '../common/app-error';
import { BEARER_CHALLENGE } from '../common/error.filter';
import { APP_CONFIG } from '../common/tokens';
import type { AppConfig } from '../config/app-config';
import type { UpstreamHealthSnapshot, UpstreamProbe } from '../domain/upstream-probe.port';
import { UPSTREAM_PROBE } from '../health/health.tokens';
import { sendOrderList } from './audit-orders-page.controller';
import { newNonce, sendPage, sessionCookie } from './audit-page.filter';
import { AuditPage, FormPost, renderPage } from './audit-page.shared';
import { dashboardPage, signInPage } from './audit-page.views';
import { AuditQueryService } from './audit-query.service';
import { AUDIT_QUERY, AUDIT_SESSIONS } from './audit.tokens';

/**
 * The audit page's front door: the dashboard at /audit, and signing in and out (the other
 * page groups have their own controllers, all under @AuditPage()).
 */
@AuditPage()
export class AuditPageController {
  constructor(
    @Inject(AUDIT_QUERY) private readonly query: AuditQueryService,
    @Inject(AUDIT_SESSIONS) private readonly sessions: AuditSessionStore,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(UPSTREAM_PROBE) private readonly upstream: UpstreamProbe,
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
    if (Object.keys(q).length > 0) {
      return sendOrderList(this.query, this.config.UPSTREAM_STUCK_HOURS, q, req, res);
    }
    const [data, upstream] = await Promise.all([
      this.query.dashboard(),
      this.upstream.check().catch((error: unknown): UpstreamHealthSnapshot => ({
        status: 'unknown',
        baseUrl: '',
        detail: `not checked: ${(error as Error).name}`,
      })),
    ]);
    renderPage(req, res, (ctx) =>
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
    );
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
      res.setHeader('WWW-Authenticate', BEARER_CHALLENGE);
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

  @FormPost('session/sign-out')
  async signOut(@Req() req: AuthenticatedRequest, @Res() res: Response): Promise<void> {
    const id = readCookie(req.headers.cookie, AUDIT_SESSION_COOKIE);
    if (id) await this.sessions.delete(id);
    res.setHeader('Set-Cookie', sessionCookie('', req, 0));
    res.redirect(303, '/audit');
  }
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
