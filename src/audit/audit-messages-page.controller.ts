import { Body, Get, Inject, Param, Query, Req, Res } from '@nestjs/common';
import type { Response } from 'express';
import { Roles } from '../auth/auth.decorators';
import type { AuthenticatedRequest } from '../auth/bearer-auth.guard';
import { resolveReveal } from './audit-api.reveal';
import {
  bulkReplayFormSchema,
  deadLetterListSchema,
  messageBrowseSchema,
  parseInput,
  replaySchema,
} from './audit-api.dto';
import type { MessageReprocessor } from './audit-api.reprocess';
import { AuditPage, FormPost, RecordPages, renderPage, searchPage } from './audit-page.shared';
import type { DetailPageRequest, PageRequest } from './audit-page.shared';
import {
  bulkReplayPage,
  deadLettersPage,
  messageListPage,
  messagePage,
  replayConfirmPage,
} from './audit-page.views';
import { presentMessage, presentOutbox } from './audit-presenter';
import { AuditQueryService } from './audit-query.service';
import { oneRawViewAtATime } from './raw-view.gate';
import { AUDIT_QUERY, DEAD_LETTER_BULK_REPLAY, MESSAGE_REPROCESSOR } from './audit.tokens';
import type { BulkReplayRequest, DeadLetterBulkReplay } from './dead-letter-bulk-replay';
import { AppError } from '../common/app-error';

/**
 * The audit page's messages: the browser of every inbound message and request, one message
 * (reveal, reprocess), and the dead letters with their replay.
 */
const BULK_FILTERS = ['destination', 'error', 'from', 'to'] as const;

/** The bulk replay form's filters as the use case takes them. */
function bulkFilterOf(input: {
  destination?: string;
  error?: string;
  from?: Date;
  to?: Date;
  limit?: number;
}): Omit<BulkReplayRequest, 'reason'> {
  return {
    ...(input.destination ? { destination: input.destination } : {}),
    ...(input.error ? { error: input.error } : {}),
    ...(input.from ? { from: input.from } : {}),
    ...(input.to ? { to: input.to } : {}),
    ...(input.limit ? { limit: input.limit } : {}),
  };
}

@AuditPage()
export class AuditMessagesPageController extends RecordPages('messages') {
  @Inject(AUDIT_QUERY) private readonly query!: AuditQueryService;
  @Inject(MESSAGE_REPROCESSOR) private readonly reprocessor!: MessageReprocessor;
  @Inject(DEAD_LETTER_BULK_REPLAY) private readonly bulkReplay!: DeadLetterBulkReplay;

  /** The message browser: every inbound message and request, accepted or refused. */
  protected override async renderList({ req, res, query }: PageRequest): Promise<void> {
    const { filters, found, problem } = await searchPage(
      query,
      messageBrowseSchema,
      ({ msh10, ...browse }) => this.query.browseMessages({ ...browse, messageControlId: msh10 }),
    );
    renderPage(req, res, (ctx) =>
      messageListPage(ctx, {
        filters,
        messages: found?.items ?? [],
        nextCursor: found?.nextCursor,
        lateCommits: found?.lateCommits,
        moreLateCommits: found?.moreLateCommits,
        searchedTo: found?.searchedTo,
        problem,
      }),
    );
  }

  /** The reprocess button's target (admin): reason in the form body, with the CSRF token. */
  @Roles('admin')
  @FormPost('messages/:id/reprocess')
  async reprocessMessage(
    @Param('id') id: string,
    @Body() body: Record<string, unknown> | undefined,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    const { reason } = parseInput(replaySchema, body);
    const result = await this.reprocessor.reprocess(id, req.principal!.actor, reason);
    res.redirect(303, `/audit/messages/${encodeURIComponent(result.reprocessedMessageId ?? id)}`);
  }

  /** One message (GET and reveal: RecordPages). */
  protected override async renderDetail({ id, req, res, form }: DetailPageRequest): Promise<void> {
    await oneRawViewAtATime(async () => {
      const { message, events } = await this.query.message(id);
      const reveal = await resolveReveal(this.query, req, form, {
        inboundMessageId: id,
        what: 'message page',
      });
      const orderIds = [
        ...new Set(events.map((e) => e.orderId).filter((o): o is string => Boolean(o))),
      ];
      const view = presentMessage(message, events, reveal);
      renderPage(req, res, (ctx) => messagePage(ctx, view, orderIds));
    });
  }

  /**
   * The dead letters, by the API's parameters: a refused one is said above the list, as on the
   * order and message lists (before, only `cursor` was read and anything else was dropped).
   */
  @Get('dead-letters')
  async deadLetters(
    @Query() q: Record<string, unknown>,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    const { filters, found, problem } = await searchPage(
      q,
      deadLetterListSchema,
      ({ replayed: _replayed, ...paging }) => this.query.deadLetters(paging),
    );
    const { replayed, ...paging } = filters;
    renderPage(req, res, (ctx) =>
      deadLettersPage(ctx, {
        filters: paging,
        items: (found?.items ?? []).map((r) => presentOutbox(r, false)),
        nextCursor: found?.nextCursor,
        lateCommits: found?.lateCommits,
        moreLateCommits: found?.moreLateCommits,
        replayed: replayed && /^\d{1,18}$/.test(replayed) ? replayed : undefined,
        problem,
      }),
    );
  }

  /** Bulk replay (admins): the form, and with filters, what a dry run of them finds. */
  @Roles('admin')
  @Get('dead-letters/replay')
  async bulkReplayForm(
    @Query() q: Record<string, unknown>,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    if (!BULK_FILTERS.some((k) => typeof q[k] === 'string' && q[k].trim() !== '')) {
      renderPage(req, res, (ctx) => bulkReplayPage(ctx, { filters: {} }));
      return;
    }
    const { filters, found, problem } = await searchPage(q, bulkReplayFormSchema, (input) =>
      this.bulkReplay.replay(
        { ...bulkFilterOf(input), reason: 'dry run', dryRun: true },
        req.principal!.actor,
      ),
    );
    renderPage(req, res, (ctx) => bulkReplayPage(ctx, { filters, result: found, problem }));
  }

  /** Bulk replay (admins): the letters the filters name, with a reason and the confirmation. */
  @Roles('admin')
  @FormPost('dead-letters/replay')
  async bulkReplayNow(
    @Body() body: Record<string, unknown> | undefined,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    const { filters, found, problem } = await searchPage(
      body ?? {},
      bulkReplayFormSchema,
      async (input) => {
        if (input.confirm !== 'yes') {
          throw new AppError('bad_request', 'Tick the confirmation box to replay.');
        }
        if (!input.reason || input.reason.length < 3) {
          throw new AppError('bad_request', 'a reason is required to replay');
        }
        return this.bulkReplay.replay(
          { ...bulkFilterOf(input), reason: input.reason },
          req.principal!.actor,
        );
      },
    );
    renderPage(
      req,
      res,
      (ctx) => bulkReplayPage(ctx, { filters, result: found, done: Boolean(found), problem }),
      found ? 200 : 400,
    );
  }

  @Roles('admin')
  @Get('dead-letters/:id/replay')
  async confirmReplay(
    @Param('id') id: string,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    const row = await this.query.outboxEntry(id);
    renderPage(req, res, (ctx) => replayConfirmPage(ctx, presentOutbox(row, false)));
  }

  @Roles('admin')
  @FormPost('dead-letters/:id/replay')
  async replay(
    @Param('id') id: string,
    @Body() body: Record<string, unknown> | undefined,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    const row = await this.query.outboxEntry(id);
    if (body?.confirm !== 'yes') {
      const error = 'Tick the confirmation box to replay.';
      renderPage(req, res, (ctx) => replayConfirmPage(ctx, row, error), 400);
      return;
    }
    let reason: string;
    try {
      reason = parseInput(replaySchema, body).reason;
    } catch (error) {
      renderPage(req, res, (ctx) => replayConfirmPage(ctx, row, (error as Error).message), 400);
      return;
    }
    await this.query.replayDeadLetter(id, req.principal!.actor, reason);
    res.redirect(303, `/audit/dead-letters?replayed=${encodeURIComponent(id)}`);
  }
}
