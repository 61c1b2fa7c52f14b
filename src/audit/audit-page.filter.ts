import { type ArgumentsHost, Catch, HttpException, Inject } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import type { Request, Response } from 'express';
import type { Logger } from 'pino';
import { AUDIT_SESSION_COOKIE, AUDIT_SESSION_PATH } from '../auth/audit-session.store';
import type { AuthenticatedRequest } from '../auth/bearer-auth.guard';
import { AppError } from '../common/app-error';
import { ErrorFilter } from '../common/error.filter';
import { ProblemJsonFilter } from '../common/problem-json.filter';
import { LOGGER } from '../common/tokens';
import { errorPage, signInPage } from './audit-page.views';

/** Whether the caller is a browser navigating (HTML) rather than an API client. */
export function wantsHtml(req: Request): boolean {
  return req.accepts(['application/problem+json', 'application/json', 'text/html']) === 'text/html';
}

/** Security headers of every audit page: no script, inline style only with this response's nonce. */
export function sendPage(res: Response, status: number, html: string, nonce: string): void {
  res
    .status(status)
    .setHeader(
      'Content-Security-Policy',
      `default-src 'none'; style-src 'nonce-${nonce}'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`,
    )
    .setHeader('Cache-Control', 'no-store')
    .setHeader('Referrer-Policy', 'no-referrer')
    .setHeader('X-Content-Type-Options', 'nosniff')
    .setHeader('X-Frame-Options', 'DENY')
    .type('text/html; charset=utf-8')
    .send(html);
}

export function newNonce(): string {
  return randomBytes(16).toString('base64');
}

/**
 * Errors of the audit page. A browser gets HTML: the sign-in form on 401 (a browser cannot
 * send a bearer header, so this is how it authenticates), an error page otherwise. API
 * clients (no text/html in Accept) get the same problem JSON as everywhere else.
 */
@Catch()
export class AuditPageFilter extends ErrorFilter {
  private readonly problems: ProblemJsonFilter;

  constructor(@Inject(LOGGER) logger: Logger) {
    super(logger);
    this.problems = new ProblemJsonFilter(logger);
  }

  catch(exception: unknown, host: ArgumentsHost): void {
    const { req, res } = this.http<AuthenticatedRequest>(host);
    if (!wantsHtml(req)) {
      this.problems.catch(exception, host);
      return;
    }
    const nonce = newNonce();
    const status =
      exception instanceof AppError
        ? exception.httpStatus
        : exception instanceof HttpException
          ? exception.getStatus()
          : 500;
    this.logAndChallenge(status, exception, req, res, 'audit page failed');
    if (status === 401) {
      if (req.headers.cookie?.includes(`${AUDIT_SESSION_COOKIE}=`)) {
        res.setHeader('Set-Cookie', sessionCookie('', req, 0));
      }
      const next = req.method === 'GET' ? req.originalUrl : '/audit';
      sendPage(res, 401, signInPage({ nonce }, { next }), nonce);
      return;
    }
    const detail =
      status >= 500
        ? 'Something went wrong; the service log has the details.'
        : exception instanceof Error
          ? exception.message
          : 'request failed';
    const title =
      status === 403
        ? 'Not allowed'
        : status === 404
          ? 'Not found'
          : status >= 500
            ? 'Error'
            : 'Bad request';
    const p = req.principal;
    sendPage(
      res,
      status,
      errorPage(
        { nonce, role: p?.role, actor: p?.actor, csrfToken: p?.session?.csrfToken },
        status,
        title,
        detail,
      ),
      nonce,
    );
  }
}

/**
 * The audit session cookie (empty with Max-Age 0 to clear it): HttpOnly, SameSite=Strict,
 * scoped to /audit, and Secure when the request came over HTTPS (directly or through a proxy
 * that says so), so that setting and clearing carry the same attributes.
 */
export function sessionCookie(
  id: string,
  req: { secure: boolean; headers: Record<string, string | string[] | undefined> },
  maxAge: number,
): string {
  const secure = req.secure || req.headers['x-forwarded-proto'] === 'https' ? '; Secure' : '';
  return `${AUDIT_SESSION_COOKIE}=${id}; Path=${AUDIT_SESSION_PATH}; HttpOnly; SameSite=Strict; Max-Age=${maxAge}${secure}`;
}
