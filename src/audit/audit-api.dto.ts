import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { z } from 'zod';
import { AppError } from '../common/app-error';
import { ORDER_STATES } from '../domain/order-state';
import { DESTINATIONS } from '../outbound/outbound.settings';
import { issueSentence, refusalDetail } from './audit-api.issues';
import { BULK_REPLAY_MAX } from './dead-letter-bulk-replay';
import {
  MAX_CURSOR_LENGTH,
  MAX_PAGE_SIZE,
  ORDER_SOURCES,
  type OrderSearch,
} from './audit-query.service';

/** Request parsing (zod) and the OpenAPI shapes of the audit API. */

/** PostgreSQL text cannot hold NUL: refused here (400), not by the database (500). */
const noNul = (v: string) => !v.includes('\u0000');
const NUL_MESSAGE = 'must not contain a NUL character';
/**
 * An identifier filter: as long as the front doors store one (a placer number of 300
 * characters is accepted and kept; a limit of 200 here made such an order unfindable), bounded
 * well below what a request line may carry.
 */
const text = z.string().trim().min(1).max(4096).refine(noNul, NUL_MESSAGE).optional();
/**
 * `from`/`to`: an ISO 8601 date (`2026-11-25`, midnight UTC) or date-time, with `T` or a space;
 * without an offset it is UTC (as the page labels its fields), never the server's local time.
 * Anything else (`1`, `Nov 25`, `25.11.2026`) is refused: Date.parse would read it as a year
 * 2001 date or in the server's time zone.
 */
const ISO_INSTANT =
  /^(\d{4}-\d\d-\d\d)(?:[T ](\d\d:\d\d(?::\d\d(?:\.\d{1,9})?)?)(Z|[+-]\d\d:?\d\d)?)?$/i;
const INSTANT_MESSAGE = 'must be an ISO 8601 date or date-time (UTC unless it names an offset)';
export function isoInstant(value: string): Date | undefined {
  const m = ISO_INSTANT.exec(value);
  if (!m || !isCalendarDate(m[1]!)) return undefined;
  const at = Date.parse(`${m[1]}T${m[2] ?? '00:00'}${m[3] ?? 'Z'}`);
  return Number.isNaN(at) ? undefined : new Date(at);
}

/**
 * Whether `YYYY-MM-DD` names a day of the calendar: Date.parse rolls `2026-02-30`,
 * `2026-02-29` and `2026-04-31` over into the next month (a search from 30 February silently
 * began on 2 March).
 */
function isCalendarDate(date: string): boolean {
  const [y, mo, d] = date.split('-').map(Number) as [number, number, number];
  const day = new Date(Date.UTC(2000, mo - 1, d));
  day.setUTCFullYear(y);
  return day.getUTCFullYear() === y && day.getUTCMonth() === mo - 1 && day.getUTCDate() === d;
}
/**
 * Whether `value`'s fraction of a second goes past the millisecond (other than zeros): a Date
 * holds milliseconds, so `…00.0005` was cut to `…00.000` and a `from` took in rows from before
 * it, a `to` left out rows before it (the database keeps microseconds). Refused, never cut.
 */
function finerThanMillisecond(value: string): boolean {
  const fraction = /\.(\d+)/.exec(ISO_INSTANT.exec(value)?.[2] ?? '')?.[1] ?? '';
  return /[1-9]/.test(fraction.slice(3));
}
const instant = z
  .string()
  .trim()
  .refine((v) => isoInstant(v) !== undefined, INSTANT_MESSAGE)
  .refine(
    (v) => !finerThanMillisecond(v),
    'must not be finer than a millisecond (at most 3 digits after the second)',
  )
  .transform((v) => isoInstant(v)!)
  .optional();
const flag = z
  .enum(['true', 'false', '1', '0', 'on', ''])
  .transform((v) => v === 'true' || v === '1' || v === 'on')
  .optional();
/**
 * `to` later than `from` (the range is [from, to)): swapped dates, or the same instant twice,
 * hold no time, and answering them with an empty list reads as "not there".
 */
function aRange(q: { from?: Date; to?: Date }): boolean {
  return !q.from || !q.to || q.to.getTime() > q.from.getTime();
}
const RANGE_ISSUE = {
  path: ['to'],
  error: (issue: { input: unknown }) => {
    const { from, to } = issue.input as { from: Date; to: Date };
    return `must be later than from (from ${from.toISOString()} to ${to.toISOString()}: no time between)`;
  },
};
/**
 * `limit`: a whole number written in decimal digits, 1 to MAX_PAGE_SIZE. Anything else stays
 * text and is refused as not a number: z.coerce.number read `0x10` as 16, `1e2` as 100, `0b11`
 * as 3 and `+5` as 5 (answered 200 with a page size other than the one written), a blank as 0,
 * and a 20-digit number as out of two ranges at once. Over the maximum ends the checks there.
 */
const limit = z
  .preprocess(
    (v) => (typeof v === 'string' && /^-?\d+(?:\.\d+)?$/.test(v.trim()) ? Number(v.trim()) : v),
    z.number().min(1).max(MAX_PAGE_SIZE, { abort: true }).int(),
  )
  .optional();
const cursor = z.string().max(MAX_CURSOR_LENGTH).optional();

/**
 * The search filters are strict: a filter the search does not know (`patientName`, a typo
 * such as `accesion`) is refused with 400 naming the filters it knows, never ignored (an
 * ignored filter answers every order, newest first, as if it had matched).
 */
export const orderSearchSchema = z
  .strictObject({
    orderId: text,
    upstreamOrderId: text,
    accession: text,
    patientId: text,
    placer: text,
    filler: text,
    msh10: text,
    studyInstanceUid: text,
    state: z.enum(ORDER_STATES).optional(),
    source: z.enum(ORDER_SOURCES).optional(),
    sender: text,
    destination: text,
    from: instant,
    to: instant,
    errorsOnly: flag,
    cursor,
    limit,
  })
  .refine(aRange, RANGE_ISSUE);

export const eventSearchSchema = z
  .strictObject({
    orderId: text,
    errorsOnly: flag,
    destination: text,
    from: instant,
    to: instant,
    cursor,
    limit,
  })
  .refine(aRange, RANGE_ISSUE);

/** The dead-letter list's paging (the API; the same limits as the searches). */
export const deadLetterPageSchema = z.strictObject({ cursor, limit });

/**
 * The dead-letter page's parameters: the API's, and `replayed` (the id a replay redirected
 * with; only a banner, shown when it is an outbox id).
 */
export const deadLetterListSchema = deadLetterPageSchema.extend({
  replayed: z.string().optional(),
});

export const MESSAGE_OUTCOMES = ['accepted', 'duplicate', 'rejected', 'error', 'refused'] as const;

/** The message browser's filters (page and API); `msh10` keeps the old exact lookup. */
export const messageBrowseSchema = z
  .strictObject({
    msh10: text,
    from: instant,
    to: instant,
    sender: text,
    transport: z.enum(['mllp', 'fhir-rest', 'fhir-subscription']).optional(),
    answerCode: text,
    outcome: z.enum(MESSAGE_OUTCOMES).optional(),
    text: z.string().trim().min(2).max(200).refine(noNul, NUL_MESSAGE).optional(),
    cursor,
    limit,
  })
  .refine(aRange, RANGE_ISSUE);

export const revealSchema = z.object({
  reveal: flag,
  reason: z.string().trim().max(500).optional(),
});

export const replaySchema = z.object({
  reason: z.string().trim().min(3, 'a reason is required').max(500),
});

/** The destinations an outbox row can have (outbox.destination), as a bulk replay names them. */
const DESTINATION_NAMES: readonly string[] = Object.values(DESTINATIONS);
/**
 * A bulk replay's destination: one of the destination names. Another (a typo, `__proto__`) is
 * a bad request naming them, not a 409 "not configured" that reads the name as a setting.
 */
const destinationName = z
  .string()
  .trim()
  .refine((v) => DESTINATION_NAMES.includes(v), {
    error: `one of ${DESTINATION_NAMES.join(', ')}`,
  })
  .optional();

/**
 * A bulk replay: which dead letters (destination, text in the reason they died for, when they
 * were given up: at least one), at most `limit` (1..100, default 100), and the replay's
 * reason; `dryRun` counts and lists them, changing nothing.
 */
export const bulkReplaySchema = z
  .strictObject({
    reason: z.string().trim().min(3, 'a reason is required').max(500),
    destination: destinationName,
    error: text,
    from: instant,
    to: instant,
    limit: z.number().int().min(1).max(BULK_REPLAY_MAX).optional(),
    dryRun: z.boolean().optional(),
  })
  .refine(aRange, RANGE_ISSUE)
  .refine((b) => Boolean(b.destination || b.error || b.from || b.to), {
    path: ['destination'],
    error: 'give destination, error, from or to: a bulk replay takes the dead letters they name',
  });

/**
 * Parses query or body values; blank strings count as absent (HTML forms send them). A key of
 * the schema given more than once (`?accession=A&accession=B`) or as a structure
 * (`?accession[x]=A`) is refused with 400: dropping it would search without that filter.
 */
export function parseInput<T extends z.ZodType>(schema: T, input: unknown): z.infer<T> {
  const known = schema instanceof z.ZodObject ? Object.keys(schema.shape) : [];
  const entries = input && typeof input === 'object' ? Object.entries(input) : [];
  const repeated = entries
    .filter(([k, v]) => known.includes(k) && v !== null && typeof v === 'object')
    .map(
      ([k, v]) =>
        `${k}: give one value (${Array.isArray(v) ? `it came ${v.length} times` : 'not a structure'})`,
    );
  if (repeated.length > 0) throw new AppError('bad_request', repeated.join('; '));
  const cleaned = Object.fromEntries(entries.filter(([, v]) => v !== '' && v !== undefined));
  const result = schema.safeParse(cleaned, { error: issueSentence });
  if (!result.success) {
    throw new AppError(
      'bad_request',
      result.error.issues
        .map((i) =>
          i.code === 'unrecognized_keys'
            ? `unknown filter ${i.keys.join(', ')} (the filters are ${known.join(', ')})`
            : refusalDetail(i),
        )
        .join('; '),
    );
  }
  return result.data;
}

export function toOrderSearch(q: z.infer<typeof orderSearchSchema>): OrderSearch {
  return {
    orderId: q.orderId,
    upstreamOrderId: q.upstreamOrderId,
    accession: q.accession,
    patientId: q.patientId,
    placer: q.placer,
    filler: q.filler,
    messageControlId: q.msh10,
    studyInstanceUid: q.studyInstanceUid,
    state: q.state,
    source: q.source,
    sender: q.sender,
    destination: q.destination,
    from: q.from,
    to: q.to,
    errorsOnly: q.errorsOnly,
    cursor: q.cursor,
    limit: q.limit,
  };
}

export class OrderSummaryDto {
  @ApiProperty({ format: 'uuid' }) id!: string;
  @ApiProperty({ format: 'date-time' }) createdAt!: string;
  @ApiProperty({ format: 'date-time' }) updatedAt!: string;
  @ApiProperty({ enum: ORDER_SOURCES }) source!: string;
  @ApiPropertyOptional({ nullable: true }) sender!: string | null;
  @ApiProperty({ enum: ORDER_STATES }) state!: string;
  @ApiPropertyOptional({ nullable: true }) upstreamOrderId!: string | null;
  @ApiPropertyOptional({ nullable: true }) upstreamStatus!: string | null;
  @ApiPropertyOptional({ nullable: true }) accessionNumber!: string | null;
  @ApiPropertyOptional({
    nullable: true,
    description: 'masked for analysts (last two characters kept)',
  })
  patientId!: string | null;
  @ApiPropertyOptional({ nullable: true }) placerOrderNumber!: string | null;
  @ApiPropertyOptional({ nullable: true }) fillerOrderNumber!: string | null;
  @ApiPropertyOptional({ nullable: true }) studyInstanceUid!: string | null;
  @ApiPropertyOptional({ nullable: true }) mappingVersion!: string | null;
  @ApiPropertyOptional({ nullable: true }) lastError!: string | null;
  @ApiPropertyOptional({ nullable: true, format: 'uuid' }) inboundMessageId!: string | null;
}

/** What every keyset-paged audit list answers beside its items. */
abstract class KeysetPageDto {
  @ApiPropertyOptional({ description: 'pass as `cursor` for the next page; absent on the last' })
  nextCursor?: string;
  @ApiPropertyOptional({
    description:
      'how many of the first items committed after the page before was read (newer than it, so shown here); absent when none',
  })
  lateCommits?: number;
  @ApiPropertyOptional({
    enum: [true],
    description:
      'true when more items committed late than the page holds: the lateCommits newest are shown, the others only by searching again from the first page (no cursor); absent otherwise',
  })
  moreLateCommits?: true;
}

export class OrderPageDto extends KeysetPageDto {
  @ApiProperty({ type: [OrderSummaryDto] }) items!: OrderSummaryDto[];
}

export class AuditEventDto {
  @ApiProperty() id!: string;
  @ApiProperty({ format: 'date-time' }) occurredAt!: string;
  @ApiPropertyOptional({ nullable: true, format: 'uuid' }) orderId!: string | null;
  @ApiPropertyOptional({ nullable: true, format: 'uuid' }) inboundMessageId!: string | null;
  @ApiProperty({ example: 'mapping.applied' }) kind!: string;
  @ApiProperty({ enum: ['info', 'warning', 'error'] }) severity!: string;
  @ApiPropertyOptional({ nullable: true }) actor!: string | null;
  @ApiProperty() summary!: string;
  @ApiProperty({
    type: 'object',
    additionalProperties: true,
    description: 'kind-specific; PHI masked for analysts (lineage values included)',
  })
  detail!: Record<string, unknown>;
}

export class EventPageDto extends KeysetPageDto {
  @ApiProperty({ type: [AuditEventDto] }) items!: AuditEventDto[];
}

export class LineageLineDto {
  @ApiProperty({ example: 'accessionNumber' }) target!: string;
  @ApiProperty({ example: 'OBR-18' }) source!: string;
  @ApiProperty({ description: 'the value as stored in the OrderRequest' }) value!: string;
  @ApiProperty({ example: 'hl7.order.accession' }) ruleId!: string;
  @ApiPropertyOptional({
    example: 'product-table: 24590-2^LN → brain-mr-volumetry',
    description:
      'the table row or conversion that produced the value, when it is not the source text',
  })
  rule?: string;
}

export class InboundMessageDto {
  @ApiProperty({ format: 'uuid' }) id!: string;
  @ApiProperty({ format: 'date-time' }) receivedAt!: string;
  @ApiProperty() transport!: string;
  @ApiPropertyOptional({ nullable: true }) sender!: string | null;
  @ApiPropertyOptional({ nullable: true }) messageType!: string | null;
  @ApiPropertyOptional({ nullable: true }) messageControlId!: string | null;
  @ApiProperty({ enum: ['accepted', 'rejected', 'error', 'duplicate'] }) outcome!: string;
  @ApiPropertyOptional({ nullable: true }) responseCode!: string | null;
  @ApiProperty() bytes!: number;
}

export class OutboundDocumentDto {
  @ApiProperty() id!: string;
  @ApiPropertyOptional({ nullable: true, format: 'uuid' }) orderId!: string | null;
  @ApiProperty() destination!: string;
  @ApiProperty() kind!: string;
  @ApiProperty({ enum: ['pending', 'delivered', 'dead'] }) status!: string;
  @ApiProperty() attempts!: number;
  @ApiPropertyOptional({ nullable: true }) lastError!: string | null;
  @ApiProperty({ format: 'date-time' }) updatedAt!: string;
  @ApiProperty({
    type: 'object',
    additionalProperties: true,
    description:
      'in a list, a payload over 16 KiB of JSON is `{cut: {shownCharacters, totalCharacters}, head}` (masked); the whole: fullPath',
  })
  payload!: Record<string, unknown>;
  @ApiPropertyOptional({
    description:
      'true when a body (payload, document as sent, peer answer) is cut in this list; fullPath serves it whole, within 512 Ki characters a body',
  })
  bodiesCut?: boolean;
  @ApiPropertyOptional({ example: '/api/audit/outbound/42' }) fullPath?: string;
}

export class OrderDetailDto {
  @ApiProperty({ type: OrderSummaryDto, description: 'with `request` (the OrderRequest, masked)' })
  order!: OrderSummaryDto;
  @ApiProperty({
    type: [AuditEventDto],
    description:
      'oldest first; over 500 events, the first 100, the newest 400 and up to 500 events between them of a kind that does not repeat (timelineOmitted: how many are left out; timelineOlderCursor pages them)',
  })
  timeline!: AuditEventDto[];
  @ApiProperty({
    description:
      'repeated events (resent orders, polls, retries) left out of the middle of a timeline over 500 events; all of them: GET /api/audit/events?orderId=',
  })
  timelineOmitted!: number;
  @ApiPropertyOptional({
    description:
      'with a cut timeline: the cursor of GET /api/audit/events?orderId={id} for the events older than the newest shown, newest first',
  })
  timelineOlderCursor?: string;
  @ApiProperty({ type: [InboundMessageDto] }) messages!: InboundMessageDto[];
  @ApiProperty({
    type: [OutboundDocumentDto],
    description:
      'the newest 20 outbound documents, newest first; the older ones: GET /api/audit/orders/{id}/outbound?cursor=outboundNextCursor',
  })
  outbound!: OutboundDocumentDto[];
  @ApiProperty({ description: 'how many outbound documents the order has' })
  outboundTotal!: number;
  @ApiPropertyOptional({ description: 'cursor of the next (older) page of outbound documents' })
  outboundNextCursor?: string;
  @ApiProperty({ type: [LineageLineDto] }) lineage!: LineageLineDto[];
  @ApiPropertyOptional({ nullable: true }) mappingVersion!: string | null;
  @ApiProperty({ description: 'false only for an admin who revealed with a reason' })
  masked!: boolean;
}

export class MessagePageDto extends KeysetPageDto {
  @ApiProperty({ type: [InboundMessageDto] }) items!: InboundMessageDto[];
  @ApiPropertyOptional({
    format: 'date-time',
    description:
      'with `text`: a page reads at most 10,000 messages for it; when it stopped there before filling, the time of the last message it read (more may match below: nextCursor searches on); absent otherwise',
  })
  searchedTo?: string;
}

export class OutboundPageDto extends KeysetPageDto {
  @ApiProperty({ type: [OutboundDocumentDto] }) items!: OutboundDocumentDto[];
}

export class RevealRequestDto {
  @ApiProperty({
    minLength: 3,
    maxLength: 500,
    example: 'clinician call, ticket 4471',
    description: 'why unmasked PHI is needed (audited as phi.reveal)',
  })
  reason!: string;
}

export class ReplayRequestDto {
  @ApiProperty({
    minLength: 3,
    maxLength: 500,
    example: 'RIS was down for maintenance 02:00-03:00',
  })
  reason!: string;
}

/**
 * The page's bulk replay form (text fields): the same filters, `limit` written in digits, and
 * for the replay itself a reason and the ticked confirmation.
 */
export const bulkReplayFormSchema = z
  .strictObject({
    destination: destinationName,
    error: text,
    from: instant,
    to: instant,
    limit: z
      .preprocess(
        (v) => (typeof v === 'string' && /^\d+$/.test(v.trim()) ? Number(v.trim()) : v),
        z.number().int().min(1).max(BULK_REPLAY_MAX),
      )
      .optional(),
    reason: z.string().trim().max(500).optional(),
    confirm: z.string().optional(),
    _csrf: z.string().optional(),
  })
  .refine(aRange, RANGE_ISSUE)
  .refine((b) => Boolean(b.destination || b.error || b.from || b.to), {
    path: ['destination'],
    error: 'give destination, error, from or to: a bulk replay takes the dead letters they name',
  });

export class BulkReplayRequestDto {
  @ApiProperty({ minLength: 3, maxLength: 500, example: 'RIS interface fixed, ticket 4471' })
  reason!: string;
  @ApiPropertyOptional({ example: 'ris-hl7' }) destination?: string;
  @ApiPropertyOptional({
    description: 'text in the reason the letter was given up for (case-insensitive)',
    example: 'AR',
  })
  error?: string;
  @ApiPropertyOptional({ description: 'given up at or after (ISO 8601, UTC unless an offset)' })
  from?: string;
  @ApiPropertyOptional({ description: 'given up before' }) to?: string;
  @ApiPropertyOptional({ minimum: 1, maximum: 100, default: 100 }) limit?: number;
  @ApiPropertyOptional({ description: 'count and list, change nothing' }) dryRun?: boolean;
}

export class ReplayResultDto {
  @ApiProperty({ type: OutboundDocumentDto }) outbox!: OutboundDocumentDto;
  @ApiProperty({ example: 'outbound.replay' }) auditEventKind!: string;
}
