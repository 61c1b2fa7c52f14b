import {
  Body,
  Controller,
  Get,
  HttpCode,
  Inject,
  Param,
  ParseUUIDPipe,
  Post,
  Req,
} from '@nestjs/common';
import {
  ApiBody,
  ApiOkResponse,
  ApiOperation,
  ApiProperty,
  ApiPropertyOptional,
  ApiTags,
} from '@nestjs/swagger';
import { z } from 'zod';
import { Roles } from '../auth/auth.decorators';
import type { AuthenticatedRequest } from '../auth/bearer-auth.guard';
import { ownOrdersOf } from '../auth/sender-identity';
import { AppError } from '../common/app-error';
import { ORDER_STATES } from '../domain/order-state';
import { OrderRepository } from '../persistence/order.repository';
import { OrderLifecycleError } from './order-lifecycle.error';
import { OrderLifecycleService } from './order-lifecycle.service';
import { OrderPollerService, type PollCycleStats } from './order-poller.service';

class CancelOrderDto {
  @ApiProperty({ description: 'why the order is cancelled (audited)', maxLength: 1000 })
  reason!: string;
}

class QcBypassDto {
  @ApiPropertyOptional({
    description: 'the clinical reason (required unless withdrawing)',
    maxLength: 1000,
  })
  reason?: string;
  @ApiPropertyOptional({ description: 'true: withdraw a pending bypass request' })
  withdraw?: boolean;
}

class OrderStatusDto {
  @ApiProperty({ format: 'uuid' }) id!: string;
  @ApiProperty({ enum: ORDER_STATES }) state!: string;
  @ApiProperty() source!: string;
  @ApiPropertyOptional({ nullable: true }) upstreamOrderId!: string | null;
  @ApiPropertyOptional({ nullable: true }) upstreamStatus!: string | null;
  @ApiPropertyOptional({ nullable: true }) upstreamBatchId!: string | null;
  @ApiProperty({ type: [String] }) products!: string[];
  @ApiProperty() cancelRequested!: boolean;
  @ApiPropertyOptional({ nullable: true, description: 'status, who, why, when' })
  qcBypass!: unknown;
  @ApiPropertyOptional({ nullable: true, description: 'deadline or refusal that ended the order' })
  alert!: string | null;
  @ApiPropertyOptional({ nullable: true }) lastError!: string | null;
  @ApiProperty({ type: [String], description: 'documents stored (kind/report type)' })
  documents!: string[];
  @ApiProperty({ format: 'date-time' }) createdAt!: string;
  @ApiProperty({ format: 'date-time' }) updatedAt!: string;
  @ApiProperty({ description: 'the order timeline on the audit page' }) auditUrl!: string;
}

/** The longest QC bypass reason the upstream takes (docs/upstream-assumptions.md, QC bypass). */
const MAX_BYPASS_REASON = 1000;
/**
 * The longest cancel reason: it is stored on the order and in the audit log and shown on the
 * order's timeline; a reason is a sentence or two (a 200,000-character one was stored as is).
 */
const MAX_CANCEL_REASON = 1000;
const cancelBody = z.object({
  reason: z
    .string()
    .trim()
    .min(1, 'a reason is required')
    .max(MAX_CANCEL_REASON, `at most ${MAX_CANCEL_REASON} characters`),
});
const bypassBody = z.object({
  reason: z
    .string()
    .trim()
    .max(MAX_BYPASS_REASON, `at most ${MAX_BYPASS_REASON} characters (the upstream takes no more)`)
    .optional(),
  withdraw: z.boolean().optional(),
});

function parse<T>(schema: z.ZodType<T>, body: unknown): T {
  const parsed = schema.safeParse(body ?? {});
  if (!parsed.success) {
    throw new AppError(
      'bad_request',
      parsed.error.issues.map((i) => `${i.path.join('.') || 'body'}: ${i.message}`).join('; '),
    );
  }
  return parsed.data;
}

/** Operators' and clinicians' actions on an order, and its PHI-free status. */
@ApiTags('orders')
@Controller('api/orders')
export class OrdersController {
  constructor(
    @Inject(OrderLifecycleService) private readonly lifecycle: OrderLifecycleService,
    @Inject(OrderPollerService) private readonly poller: OrderPollerService,
    @Inject(OrderRepository) private readonly orders: OrderRepository,
  ) {}

  @Roles('analyst')
  @Get(':id')
  @ApiOperation({ summary: "An order's state and upstream status (no PHI)" })
  @ApiOkResponse({ type: OrderStatusDto })
  async status(@Param('id', new ParseUUIDPipe()) id: string): Promise<OrderStatusDto> {
    const r = await this.orders.statusView(id);
    if (!r) throw new OrderLifecycleError('order_not_found', 'no such order');
    return {
      id: r.id as string,
      state: r.state as string,
      source: r.source as string,
      upstreamOrderId: (r.upstream_order_id as string | null) ?? null,
      upstreamStatus: (r.upstream_status as string | null) ?? null,
      upstreamBatchId: (r.upstream_batch_id as string | null) ?? null,
      products: (r.products as string[] | null) ?? [],
      cancelRequested: r.cancel_requested_at !== null,
      qcBypass: r.qc_bypass ?? null,
      alert: (r.alert as string | null) ?? null,
      lastError: (r.last_error as string | null) ?? null,
      documents: r.documents as string[],
      createdAt: (r.created_at as Date).toISOString(),
      updatedAt: (r.updated_at as Date).toISOString(),
      auditUrl: `/audit/orders/${id}`,
    };
  }

  @Roles('sender')
  @Post(':id/cancel')
  @HttpCode(202)
  @ApiOperation({ summary: 'Cancel an order (upstream too); the end state follows asynchronously' })
  @ApiBody({ type: CancelOrderDto })
  async cancel(
    @Param('id', new ParseUUIDPipe()) id: string,
    @Body() body: unknown,
    @Req() req: AuthenticatedRequest,
  ): Promise<{ id: string; cancelRequested: true }> {
    const { reason } = parse(cancelBody, body);
    // A sender token cancels only what it submitted; another's order is answered 404 as unknown.
    await this.lifecycle.requestCancel(id, reason, req.principal!.actor, ownOrdersOf(req));
    return { id, cancelRequested: true };
  }

  @Roles('sender')
  @Post(':id/qc-bypass')
  @HttpCode(200)
  @ApiOperation({
    summary: "A clinician's QC bypass (or its withdrawal while the verdict is pending)",
  })
  @ApiBody({ type: QcBypassDto })
  async qcBypass(
    @Param('id', new ParseUUIDPipe()) id: string,
    @Body() body: unknown,
    @Req() req: AuthenticatedRequest,
  ) {
    const { reason, withdraw } = parse(bypassBody, body);
    return this.lifecycle.decideQcBypass(id, {
      reason,
      withdraw,
      actor: req.principal!.actor,
      restrictedTo: ownOrdersOf(req),
    });
  }

  @Roles('admin')
  @Post('poll-cycle')
  @HttpCode(200)
  @ApiOperation({
    summary:
      'Run the lifecycle tick now (deadlines, lapsed upload leases) and one upstream poll cycle, unless one is running',
  })
  async pollNow(): Promise<
    (PollCycleStats & { sweep: unknown }) | { skipped: true; sweep: unknown }
  > {
    const sweep = await this.lifecycle.sweep();
    const stats = await this.poller.runNow();
    return stats ? { ...stats, sweep } : { skipped: true, sweep };
  }
}
