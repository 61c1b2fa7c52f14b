import {
  applyDecorators,
  Body,
  Get,
  HttpCode,
  Inject,
  Param,
  Post,
  Query,
  Req,
} from '@nestjs/common';
import {
  ApiBadRequestResponse,
  ApiBody,
  ApiConflictResponse,
  ApiNotFoundResponse,
  ApiOkResponse,
  ApiOperation,
  ApiParam,
  ApiQuery,
} from '@nestjs/swagger';
import { Roles } from '../auth/auth.decorators';
import type { AuthenticatedRequest } from '../auth/bearer-auth.guard';
import { APP_CONFIG } from '../common/tokens';
import type { AppConfig } from '../config/app-config';
import {
  BulkReplayRequestDto,
  bulkReplaySchema,
  deadLetterPageSchema,
  EventPageDto,
  eventSearchSchema,
  MESSAGE_OUTCOMES,
  messageBrowseSchema,
  MessagePageDto,
  OrderDetailDto,
  OrderPageDto,
  orderSearchSchema,
  OutboundDocumentDto,
  OutboundPageDto,
  parseInput,
  ReplayRequestDto,
  RevealRequestDto,
  ReplayResultDto,
  replaySchema,
  toOrderSearch,
} from './audit-api.dto';
import {
  type MessageView,
  type OrderDetailView,
  presentEvent,
  presentMessage,
  presentOrder,
  presentOrderDetail,
  presentDeadLetter,
  presentOutboundItem,
  presentOutboundWhole,
  presentOutbox,
  type OutboundItem,
} from './audit-presenter';
import {
  AuditQueryService,
  type DashboardData,
  type OutboxRow,
  type Page,
} from './audit-query.service';
import { AUDIT_QUERY, DEAD_LETTER_BULK_REPLAY, MESSAGE_REPROCESSOR } from './audit.tokens';
import type { BulkReplayResult, DeadLetterBulkReplay } from './dead-letter-bulk-replay';
import { AnalystApi, ApiGetOne, ApiPostWithReason } from './audit-api.decorators';
import { refuseRevealInUrl, resolveReveal } from './audit-api.reveal';
import type { MessageReprocessor, ReprocessResult } from './audit-api.reprocess';
import { activeMappingTables, type MappingTableView } from './mapping-tables.view';
import { oneRawViewAtATime } from './raw-view.gate';

const ORDER_FILTERS: Array<[string, string]> = [
  ['orderId', 'our order id (UUID)'],
  ['upstreamOrderId', 'the upstream order id'],
  ['accession', 'accession number (exact)'],
  ['patientId', 'patient identifier (exact, unmasked value)'],
  ['placer', 'placer order number (ORC-2)'],
  ['filler', 'filler order number (ORC-3)'],
  ['msh10', 'MSH-10 message control id of any message that touched the order'],
  ['studyInstanceUid', 'DICOM Study Instance UID'],
  ['state', 'our order state'],
  ['source', 'hl7v2, fhir or api'],
  ['sender', 'sending application/facility (e.g. RADIS1^IHEDEMO)'],
  ['destination', 'has an outbound document to this destination'],
  ['from', 'created at or after (ISO 8601; UTC unless it names an offset)'],
  ['to', 'created before (ISO 8601; UTC unless it names an offset)'],
  ['errorsOnly', 'only orders with an error event (true/false)'],
  ['cursor', 'nextCursor of the previous page'],
  ['limit', 'page size, 1..200 (default 50)'],
];

/**
 * The audit log's REST API: analysts read (PHI masked), admins may reveal with a reason
 * and replay dead letters. Senders get 403 everywhere here.
 */
@AnalystApi('api/audit', 'senders see nothing here')
export class AuditApiController {
  constructor(
    @Inject(AUDIT_QUERY) private readonly query: AuditQueryService,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(MESSAGE_REPROCESSOR) private readonly reprocessor: MessageReprocessor,
    @Inject(DEAD_LETTER_BULK_REPLAY) private readonly bulkReplay: DeadLetterBulkReplay,
  ) {}

  /** The reveal endpoints always reveal: the reason is the body's, audited before anything is shown. */
  private reveal(
    req: AuthenticatedRequest,
    body: Record<string, unknown> | undefined,
    target: { orderId?: string; inboundMessageId?: string; what: string },
  ): Promise<boolean> {
    return resolveReveal(this.query, req, { reveal: 'true', reason: body?.reason }, target);
  }

  @Get('orders')
  @ApiOperation({
    summary: 'Search orders',
    description:
      'Every filter given must match. Each is served by an index; pages are keyset cursors, newest first.',
  })
  @ApiOkResponse({ type: OrderPageDto })
  @ApiBadRequestResponse({ description: 'a filter is malformed' })
  @applyDecorators(
    ...ORDER_FILTERS.map(([name, description]) => ApiQuery({ name, required: false, description })),
  )
  async searchOrders(@Query() q: Record<string, unknown>): Promise<Page<unknown>> {
    const page = await this.query.searchOrders(toOrderSearch(parseInput(orderSearchSchema, q)));
    return { ...page, items: page.items.map((o) => presentOrder(o, false)) };
  }

  @ApiGetOne(
    'orders/:id',
    {
      summary: "An order's whole path",
      description:
        'The order (with its OrderRequest), its timeline (own events and the events of every inbound message that touched it), the inbound messages, the outbound documents with their answers, and the field lineage, PHI masked. Admins see it unmasked with POST /api/audit/orders/{id}/reveal.',
    },
    { type: OrderDetailDto },
    'no such order',
  )
  async order(
    @Param('id') id: string,
    @Query() q: Record<string, unknown>,
  ): Promise<OrderDetailView> {
    refuseRevealInUrl(q, `/api/audit/orders/${id}/reveal`);
    return presentOrderDetail(await this.query.orderDetail(id), false);
  }

  @Get('orders/:id/outbound')
  @ApiOperation({
    summary: "An order's outbound documents, newest first",
    description:
      'Keyset pages (the order view holds the first 20; its outboundNextCursor goes on here). Each body is cut to 16 KiB in the list (bodiesCut, fullPath).',
  })
  @ApiQuery({ name: 'cursor', required: false })
  @ApiQuery({ name: 'limit', required: false, description: 'page size, 1..200 (default 50)' })
  @ApiOkResponse({ type: OutboundPageDto })
  @ApiNotFoundResponse({ description: 'no such order' })
  async orderOutbound(
    @Param('id') id: string,
    @Query() q: Record<string, unknown>,
  ): Promise<Page<OutboundItem> & { total: number }> {
    const page = await this.query.orderOutbound(id, parseInput(deadLetterPageSchema, q));
    return { ...page, items: page.items.map((r) => presentOutboundItem(r, false)) };
  }

  @Get('outbound/:id')
  @ApiOperation({
    summary: 'One outbound document whole: payload, as sent, the peer answer (masked)',
    description:
      'Each body up to 512 Ki characters (RAW_VIEW_LIMITS), cut beyond with a `cut` note: the lists cut them at 16 KiB.',
  })
  @ApiParam({ name: 'id', description: 'outbox id' })
  @ApiOkResponse({ type: OutboundDocumentDto })
  @ApiNotFoundResponse({ description: 'no such outbound document' })
  async outbound(@Param('id') id: string): Promise<OutboundItem> {
    return presentOutboundWhole(await this.query.outboxEntry(id), false);
  }

  @ApiPostWithReason(
    'orders/:id/reveal',
    {
      summary: "An order's whole path with PHI unmasked (admin)",
      description:
        'Body `{"reason": "…"}`; the reason is required and audited as phi.reveal before anything is shown.',
    },
    RevealRequestDto,
    { type: OrderDetailDto },
  )
  async revealOrder(
    @Param('id') id: string,
    @Body() body: Record<string, unknown> | undefined,
    @Req() req: AuthenticatedRequest,
  ): Promise<OrderDetailView> {
    const detail = await this.query.orderDetail(id);
    const reveal = await this.reveal(req, body, { orderId: id, what: 'order' });
    return presentOrderDetail(detail, reveal, this.config.UPSTREAM_STUCK_HOURS);
  }

  @Get('events')
  @ApiOperation({ summary: 'Search audit events (errors only, by destination, time range)' })
  @ApiQuery({ name: 'errorsOnly', required: false })
  @ApiQuery({ name: 'destination', required: false })
  @ApiQuery({ name: 'orderId', required: false })
  @ApiQuery({ name: 'from', required: false })
  @ApiQuery({ name: 'to', required: false })
  @ApiQuery({ name: 'cursor', required: false })
  @ApiQuery({ name: 'limit', required: false })
  @ApiOkResponse({ type: EventPageDto })
  async searchEvents(@Query() q: Record<string, unknown>): Promise<Page<unknown>> {
    const page = await this.query.searchEvents(parseInput(eventSearchSchema, q));
    return { ...page, items: page.items.map((e) => presentEvent(e, false)) };
  }

  @Get('messages')
  @ApiOperation({
    summary: 'Inbound messages and requests, accepted or refused',
    description:
      'Newest first, by MSH-10 (exact), time range, sender, transport, answer code, outcome (`refused` = rejected or error) and text of our answer, all together (AND). Keyset pages.',
  })
  @ApiQuery({ name: 'msh10', required: false })
  @ApiQuery({ name: 'from', required: false })
  @ApiQuery({ name: 'to', required: false })
  @ApiQuery({ name: 'sender', required: false })
  @ApiQuery({
    name: 'transport',
    required: false,
    enum: ['mllp', 'fhir-rest', 'fhir-subscription'],
  })
  @ApiQuery({ name: 'answerCode', required: false, description: 'AA, AE, AR, or an HTTP status' })
  @ApiQuery({ name: 'outcome', required: false, enum: MESSAGE_OUTCOMES })
  @ApiQuery({ name: 'text', required: false, description: 'in our answer and its problems' })
  @ApiQuery({ name: 'cursor', required: false })
  @ApiQuery({ name: 'limit', required: false })
  @ApiOkResponse({ type: MessagePageDto })
  async searchMessages(@Query() q: Record<string, unknown>): Promise<Page<unknown>> {
    const { msh10, ...browse } = parseInput(messageBrowseSchema, q);
    // MSH-10 is one filter among the others (a RIS whose counter restarted reuses it):
    // before, it answered its 50 newest messages and dropped every other filter and the cursor.
    return this.query.browseMessages({ ...browse, messageControlId: msh10 });
  }

  @ApiGetOne(
    'messages/:id',
    {
      summary:
        'One inbound message: raw bytes decoded (HL7 segment by segment, FHIR as JSON), answer, events',
    },
    { description: 'the message view' },
    'no such message',
  )
  async message(
    @Param('id') id: string,
    @Query() q: Record<string, unknown>,
  ): Promise<MessageView> {
    refuseRevealInUrl(q, `/api/audit/messages/${id}/reveal`);
    return oneRawViewAtATime(async () => {
      const { message, events } = await this.query.message(id);
      return presentMessage(message, events, false);
    });
  }

  @ApiPostWithReason(
    'messages/:id/reveal',
    { summary: 'One inbound message with PHI unmasked (admin; reason in the body, audited)' },
    RevealRequestDto,
    { description: 'the message view' },
  )
  async revealMessage(
    @Param('id') id: string,
    @Body() body: Record<string, unknown> | undefined,
    @Req() req: AuthenticatedRequest,
  ): Promise<MessageView> {
    return oneRawViewAtATime(async () => {
      const { message, events } = await this.query.message(id);
      const reveal = await this.reveal(req, body, {
        inboundMessageId: id,
        what: 'inbound message',
      });
      return presentMessage(message, events, reveal);
    });
  }

  @Roles('admin')
  @ApiPostWithReason(
    'messages/:id/reprocess',
    {
      summary: 'Reprocess a refused inbound message (admin)',
      description:
        'Body `{"reason": "…"}` (required). The stored raw bytes run again through the intake path of the message\'s transport (MLLP handler, FHIR create or Bundle) with the site\'s current mapping, under the idempotency key `reprocess:<id>`: the order it would have produced is created once; a second reprocess answers with the first result and creates nothing. Recorded as message.reprocessed (who, why, the message it became).',
    },
    ReplayRequestDto,
    { description: 'the answer of the reprocess, the message it became, its orders' },
  )
  @ApiNotFoundResponse({ description: 'no such message' })
  @ApiConflictResponse({
    description: 'the message was accepted, or its transport cannot be reprocessed',
  })
  async reprocess(
    @Param('id') id: string,
    @Body() body: unknown,
    @Req() req: AuthenticatedRequest,
  ): Promise<ReprocessResult> {
    const { reason } = parseInput(replaySchema, body);
    return this.reprocessor.reprocess(id, req.principal!.actor, reason);
  }

  @Get('dead-letters')
  @ApiOperation({ summary: 'Outbound documents that gave up after their retries' })
  @ApiQuery({ name: 'cursor', required: false })
  @ApiQuery({ name: 'limit', required: false })
  @ApiOkResponse({ type: OutboundPageDto })
  async deadLetters(@Query() q: Record<string, unknown>): Promise<Page<OutboxRow>> {
    const page = await this.query.deadLetters(parseInput(deadLetterPageSchema, q));
    return { ...page, items: page.items.map((r) => presentDeadLetter(r)) };
  }

  @Roles('admin')
  @Post('dead-letters/replay')
  @HttpCode(200)
  @ApiOperation({
    summary: 'Replay the dead letters named by destination, reason and time given up (admin)',
    description:
      'Body `{"reason": "…", "destination"?, "error"? (text in the reason it died for), "from"?, "to"? (when given up), "limit"? (1..100, default 100), "dryRun"?}`: at least one filter. At most `limit` letters, longest dead first, each through the single replay (its own transaction, one outbound.replay event with who, why and this filter); `dryRun` counts and lists them and changes nothing. `remaining`: matching letters not queued (send again for the next ones).',
  })
  @ApiBody({ type: BulkReplayRequestDto })
  @ApiOkResponse({ description: 'matched, the letters taken and what came of each, remaining' })
  @ApiConflictResponse({ description: 'the destination named is not configured' })
  async replayMany(
    @Body() body: unknown,
    @Req() req: AuthenticatedRequest,
  ): Promise<BulkReplayResult> {
    return this.bulkReplay.replay(parseInput(bulkReplaySchema, body), req.principal!.actor);
  }

  @Roles('admin')
  @ApiPostWithReason(
    'dead-letters/:id/replay',
    {
      summary: 'Replay a dead letter (admin)',
      description:
        'Back to pending, attempts reset, due now; an outbound.replay audit event records who and why, in the same transaction.',
    },
    ReplayRequestDto,
    { type: ReplayResultDto },
    { name: 'id', description: 'outbox id' },
  )
  @ApiNotFoundResponse({ description: 'no such outbound document' })
  @ApiConflictResponse({
    description: 'the document is not dead, or its destination is no longer configured',
  })
  async replay(
    @Param('id') id: string,
    @Body() body: unknown,
    @Req() req: AuthenticatedRequest,
  ): Promise<ReplayResultDto> {
    const { reason } = parseInput(replaySchema, body);
    const result = await this.query.replayDeadLetter(id, req.principal!.actor, reason);
    return { ...result, outbox: presentOutbox(result.outbox, false) };
  }

  @Get('dashboard')
  @ApiOperation({
    summary: 'The dashboard figures for the last hour and day',
    description:
      'Orders per state, source and destination; messages in and results out (per minute for the last hour); error events; dead letters; upstream calls of the last 60 s and hour; the oldest order waiting in each open state. The same reads as the /audit page, each an index range or probe.',
  })
  @ApiOkResponse({ description: 'the figures (no PHI: counts, states, accession numbers)' })
  async dashboard(): Promise<DashboardData> {
    return this.query.dashboard();
  }

  @Get('mappings')
  @ApiOperation({ summary: 'The mapping tables this replica applies now' })
  @ApiOkResponse({ description: 'tables of text cells' })
  mappings(): { tables: MappingTableView[] } {
    return { tables: activeMappingTables(this.config) };
  }
}
