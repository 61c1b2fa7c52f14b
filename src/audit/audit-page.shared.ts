import {
  applyDecorators,
  Body,
  type CanActivate,
  Controller,
  type ExecutionContext,
  Get,
  Param,
  Post,
  Query,
  Req,
  Res,
  UseFilters,
  UseGuards,
} from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import type { Response } from 'express';
import type { z } from 'zod';
import { csrfMatches } from '../auth/audit-session.store';
import { AllowSessionCookie, Roles } from '../auth/auth.decorators';
import type { AuthenticatedRequest } from '../auth/bearer-auth.guard';
import { AppError } from '../common/app-error';
import { parseInput } from './audit-api.dto';
import { AuditPageFilter, newNonce, sendPage } from './audit-page.filter';
import type { PageContext } from './audit-page.views';

/**
 * A controller of the audit web page at /audit: server-rendered HTML, no script, no external
 * request. A browser signs in with its API token once (POST /audit/session) and then uses an
 * HttpOnly, SameSite=Strict session cookie scoped to /audit; POST forms also carry the
 * session's CSRF token. Analysts and admins only; errors answered as pages (AuditPageFilter).
 */
export const AuditPage = () =>
  applyDecorators(
    Controller('audit'),
    Roles('analyst'),
    AllowSessionCookie(),
    UseFilters(AuditPageFilter),
    ApiExcludeController(),
  );

/** Who is signed in, and a fresh nonce for the page's inline style. */
export function pageContext(req: AuthenticatedRequest): PageContext {
  const p = req.principal;
  return { nonce: newNonce(), role: p?.role, actor: p?.actor, csrfToken: p?.session?.csrfToken };
}

/** Sends the page `render` builds for the signed-in user, with the audit page's headers. */
export function renderPage(
  req: AuthenticatedRequest,
  res: Response,
  render: (ctx: PageContext) => string,
  status = 200,
): void {
  const ctx = pageContext(req);
  sendPage(res, status, render(ctx), ctx.nonce);
}

/** Cookie-authenticated form posts must echo the session's CSRF token (bearer callers need not). */
const csrfGuard: CanActivate = {
  canActivate(context: ExecutionContext): boolean {
    const req = context.switchToHttp().getRequest<AuthenticatedRequest>();
    const body = req.body as Record<string, unknown> | undefined;
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
    return true;
  },
};

/** A form of the page posts here: `POST path`, its CSRF token checked before the handler runs. */
export const FormPost = (path: string) => applyDecorators(Post(path), UseGuards(csrfGuard));

/** What a list or detail page is drawn from: the signed-in request, the response, the inputs. */
export interface PageRequest {
  req: AuthenticatedRequest;
  res: Response;
  /** The list's filters as they came in the query string. */
  query: Record<string, unknown>;
}

/** A detail page's request: the record's id and, for a reveal, the posted form. */
export interface DetailPageRequest extends PageRequest {
  id: string;
  form?: Record<string, unknown>;
}

/**
 * The base of a controller of one kind of record: a list page at `/audit/<records>` and a detail
 * page at `/audit/<records>/:id` that an admin may reveal: `GET` shows it masked; the page's
 * reveal form posts to the same path (a FormPost, CSRF checked), the reason in the body, never
 * in the URL. The list is drawn by `renderList`, both detail routes by `renderDetail`.
 */
export function RecordPages(records: string) {
  const paths = { list: records, detail: `${records}/:id` };
  abstract class RecordPagesController {
    @Get(paths.list)
    async list(
      @Query() query: Record<string, unknown>,
      @Req() req: AuthenticatedRequest,
      @Res() res: Response,
    ): Promise<void> {
      await this.renderList({ req, res, query });
    }

    @Get(paths.detail)
    async detail(
      @Param('id') id: string,
      @Req() req: AuthenticatedRequest,
      @Res() res: Response,
    ): Promise<void> {
      await this.renderDetail({ id, req, res, query: {} });
    }

    @FormPost(paths.detail)
    async revealDetail(
      @Param('id') id: string,
      @Body() form: Record<string, unknown> | undefined,
      @Req() req: AuthenticatedRequest,
      @Res() res: Response,
    ): Promise<void> {
      await this.renderDetail({ id, req, res, query: {}, form });
    }

    /** The list page for the filters in `page.query`, PHI masked. */
    protected abstract renderList(page: PageRequest): Promise<void>;

    /** The page, masked; with a reveal in the posted `form`, unmasked for an admin (recorded first). */
    protected abstract renderDetail(page: DetailPageRequest): Promise<void>;
  }
  return RecordPagesController;
}

/**
 * A list page's search: the filter form as it came in the query string (its text values,
 * trimmed: the form shows them again), parsed with `schema` and searched. A malformed filter
 * (bad_request) is shown above the form as the page's `problem`, with nothing found; any other
 * error is an error page.
 */
export async function searchPage<S extends z.ZodType, T>(
  q: Record<string, unknown>,
  schema: S,
  search: (input: z.infer<S>) => Promise<T>,
): Promise<{ filters: Record<string, string>; found?: T; problem?: string }> {
  const filters: Record<string, string> = {};
  for (const [k, v] of Object.entries(q)) if (typeof v === 'string') filters[k] = v.trim();
  try {
    // repeated or structured values go to the parser too, which refuses them (never dropped)
    const input = { ...q, ...withUtcTimes(filters) };
    return { filters, found: await search(parseInput(schema, input)) };
  } catch (error) {
    if (!(error instanceof AppError) || error.code !== 'bad_request') throw error;
    return { filters, problem: error.message };
  }
}

/** The filters for the API's schemas: `datetime-local` inputs carry no zone, the page labels them UTC. */
function withUtcTimes(filters: Record<string, string>): Record<string, string | undefined> {
  return {
    ...filters,
    ...('from' in filters ? { from: asUtc(filters.from) } : {}),
    ...('to' in filters ? { to: asUtc(filters.to) } : {}),
  };
}

function asUtc(value: string | undefined): string | undefined {
  if (!value) return value;
  return /^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?$/.test(value) ? `${value}Z` : value;
}
