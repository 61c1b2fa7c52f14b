import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { Logger } from 'pino';
import type { DataSource } from 'typeorm';
import { ImagingClientError } from '../imaging-client/imaging-client.error';
import type { ImagingClient, OrderSummary } from '../imaging-client/imaging-client';
import { upstreamOrderIdKey } from '../imaging-client/upstream-schemas';
import { TERMINAL_UPSTREAM_STATUSES, type UpstreamStatus } from '../imaging-spec/imaging-spec';
import { FOLLOWED_STATES } from '../domain/order-state';
import { OrderDocumentRepository } from '../persistence/order-document.repository';
import { OrderRepository } from '../persistence/order.repository';
import { PollScheduleRepository } from '../persistence/poll-schedule.repository';
import type { OrderLifecycleService } from './order-lifecycle.service';
import { AuditEventRepository } from '../persistence/audit-event.repository';
import {
  pollCycleCalls,
  pollCycleFollowed,
  pollCycleSeconds,
  upstreamUnknownStatus,
} from './order-metrics';

export interface PollCycleStats {
  startedAt: string;
  durationMs: number;
  /** Upstream API calls made by the cycle itself. */
  upstreamCalls: number;
  followed: number;
  /** Orders whose status differs from the last one seen (in the list, or off it). */
  changed: number;
  /**
   * Followed orders no longer in the active list: one `GET /status` each, unless `GET /reports`
   * already named their (terminal) status.
   */
  leftActiveList: number;
  /** Of those, the ones whose status came from the cycle's `GET /reports` (no `GET /status`). */
  statusFromReports: number;
  reportsListed: number;
  reportsAcknowledged: number;
  /** Listed orders whose status value the contract does not name (left as they were). */
  unknownStatus: number;
  /** Why `GET /reports` was not read this cycle (its error code), when it was not. */
  reportsUnread?: string;
}

function isTerminal(status: unknown): status is UpstreamStatus {
  return (TERMINAL_UPSTREAM_STATUSES as readonly unknown[]).includes(status);
}

/** The listed orders by id; an order listed twice with different statuses is named apart. */
function listedStatuses(active: readonly OrderSummary[]) {
  const byId = new Map<string, OrderSummary>();
  const listedTwice = new Map<string, UpstreamStatus[]>();
  for (const o of active) {
    const key = upstreamOrderIdKey(o.orderId);
    const before = byId.get(key);
    if (before && before.status !== o.status) {
      listedTwice.set(key, [...(listedTwice.get(key) ?? [before.status]), o.status]);
    }
    byId.set(key, o);
  }
  return { byId, listedTwice };
}

/**
 * The terminal status each listed report names for its order; an order whose reports name two
 * different ones (a results report and a failure report) is named apart: neither is taken.
 */
function reportedStatuses(reports: ReadonlyArray<{ order_id?: string; status?: string }>) {
  const reported = new Map<string, UpstreamStatus>();
  const disagreeing = new Map<string, UpstreamStatus[]>();
  for (const r of reports) {
    if (!r.order_id || !isTerminal(r.status)) continue;
    const key = upstreamOrderIdKey(r.order_id);
    const before = reported.get(key);
    if (before !== undefined && before !== r.status) {
      disagreeing.set(key, [...(disagreeing.get(key) ?? [before]), r.status]);
    }
    reported.set(key, r.status);
  }
  return { reported, disagreeing };
}

/** Upstream report kinds (`GET /reports` entries, docs/upstream-assumptions.md) → our stored document kinds. */
const REPORT_KIND: Record<string, string> = { results: 'results', failure: 'failure', qc: 'qc' };

const SCHEDULE = 'upstream-poll';

/** The poll cycle's running lease, renewed every third of it while the cycle runs. */
export const POLL_LEASE_MS = 30_000;

/** A claimed cycle: who holds the lease, and whether it was lost (taken after it lapsed). */
interface Lease {
  owner: string;
  lost: boolean;
}

/**
 * Follows upstream at constant cost. A cycle makes one `GET /list-orders` (every active
 * order with its status) and one `GET /reports` (reports not yet retrieved); a followed
 * order costs a call only when it left the active list (`GET /status`, once: it is terminal
 * then), and not even that when the cycle's `GET /reports` lists a report of it with its
 * terminal status (a delivered order's results report) — an unchanged in-flight order costs
 * nothing. Reports whose documents we stored
 * durably are acknowledged with one `POST /reports`. At most 3 calls plus one per changed
 * order, whatever the number of orders in flight — should the upstream page its lists (the
 * contract does not), plus one call per further page (the client reads every page).
 *
 * One cycle per cluster: the minute tick is a graphile-worker cron item (fired once per
 * cluster), and the cycle additionally claims the `poll_schedule` row (due time with jitter,
 * running lease), so a manual run or an overlapping tick never doubles a cycle. The lease is
 * short (`leaseMs`, 30 s) and renewed by its holder every third of it while the cycle runs,
 * on the database's clock, so a cycle killed mid-way blocks polling for at most the lease;
 * only the holder (`running_owner`) renews or releases it, and a cycle that finds its lease
 * taken over (it stalled longer than the lease) stops before the next order.
 */
export class OrderPollerService {
  private readonly schedule: PollScheduleRepository;
  private readonly orders: OrderRepository;
  private readonly documents: OrderDocumentRepository;
  private readonly events: AuditEventRepository;

  constructor(
    private readonly deps: {
      dataSource: DataSource;
      client: ImagingClient;
      lifecycle: OrderLifecycleService;
      logger: Logger;
      intervalMs: number;
      /** Share of the interval added or removed at random (0.1 = ±10 %). */
      jitter?: number;
      /** The running lease (default POLL_LEASE_MS). */
      leaseMs?: number;
    },
  ) {
    this.schedule = new PollScheduleRepository(deps.dataSource);
    this.orders = new OrderRepository(deps.dataSource);
    this.documents = new OrderDocumentRepository(deps.dataSource);
    this.events = new AuditEventRepository(deps.dataSource);
  }

  /** The next cycle of a sub-minute interval (the minute tick cannot start it sooner). */
  private followUp?: NodeJS.Timeout;
  private stopped = false;

  private get leaseMs(): number {
    return this.deps.leaseMs ?? POLL_LEASE_MS;
  }

  /** The minute tick: deadlines and leases, then the poll cycle if it is due. */
  async tick(): Promise<PollCycleStats | undefined> {
    // Neither half may fail the tick: a failed cron job would be retried on top of the next
    // minute's. An unreachable upstream shows on /health; the next due cycle tries again.
    try {
      await this.deps.lifecycle.sweep();
    } catch (error) {
      this.deps.logger.error({ err: (error as Error).message }, 'lifecycle sweep failed');
    }
    try {
      return await this.runIfDue();
    } catch (error) {
      this.deps.logger.warn({ err: (error as Error).message }, 'upstream poll cycle failed');
      return undefined;
    }
  }

  /** No further sub-minute cycles from this process (shutdown). */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.followUp);
  }

  /**
   * POLL_INTERVAL_SECONDS under a minute: the minute tick would still run one cycle a minute,
   * so the process that ran a cycle asks again when the next one is due (the claim decides,
   * so replicas still run one cycle at a time). A cycle costs 2–3 calls whatever the number
   * of orders, and with results waiting for the next cycle the upstream budget would go
   * unused (bench/throughput).
   */
  private scheduleFollowUp(delayMs: number): void {
    if (this.stopped || this.deps.intervalMs >= 60_000) return;
    clearTimeout(this.followUp);
    this.followUp = setTimeout(() => {
      this.followUp = undefined;
      this.runIfDue().catch((error: unknown) =>
        this.deps.logger.warn({ err: (error as Error).message }, 'upstream poll cycle failed'),
      );
    }, delayMs + 50);
    this.followUp.unref();
  }

  /** Runs a cycle if the schedule says it is due and no other replica is running one. */
  async runIfDue(): Promise<PollCycleStats | undefined> {
    const lease = await this.claim(false);
    if (!lease) return undefined;
    return this.runClaimed(lease);
  }

  /** Runs a cycle now (tests, operators), unless one is running elsewhere. */
  async runNow(): Promise<PollCycleStats | undefined> {
    const lease = await this.claim(true);
    if (!lease) return undefined;
    return this.runClaimed(lease);
  }

  private async claim(force: boolean): Promise<Lease | undefined> {
    await this.schedule.ensure(SCHEDULE);
    const owner = `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
    const claimed = await this.schedule.claim(SCHEDULE, force, this.leaseMs, owner);
    return claimed ? { owner, lost: false } : undefined;
  }

  /** Extends the lease if we still hold it; marks it lost if another cycle took it over. */
  private async renew(lease: Lease): Promise<void> {
    const renewed = await this.schedule.renew(SCHEDULE, lease.owner, this.leaseMs);
    if (!renewed && !lease.lost) {
      lease.lost = true;
      this.deps.logger.warn('poll cycle lease taken over by another cycle; this one stops');
    }
  }

  private async runClaimed(lease: Lease): Promise<PollCycleStats> {
    const { intervalMs } = this.deps;
    const jitter = this.deps.jitter ?? 0.1;
    let renewing: Promise<void> | undefined;
    const timer = setInterval(
      () => {
        // A failed renewal is retried at the next beat; the lease outlives two misses.
        renewing ??= this.renew(lease)
          .catch((err: unknown) =>
            this.deps.logger.warn({ err: (err as Error).message }, 'poll cycle lease not renewed'),
          )
          .finally(() => (renewing = undefined));
      },
      Math.max(50, Math.floor(this.leaseMs / 3)),
    );
    let stats: PollCycleStats | undefined;
    try {
      stats = await this.cycle(lease);
      return stats;
    } finally {
      clearInterval(timer);
      await renewing;
      const nextMs = Math.round(intervalMs * (1 - jitter + 2 * jitter * Math.random()));
      // Only the holder releases the lease and sets the next due time.
      await this.schedule.release(SCHEDULE, lease.owner, nextMs, stats ?? { failed: true });
      this.scheduleFollowUp(nextMs);
    }
  }

  private async cycle(lease: Lease): Promise<PollCycleStats> {
    const { client, lifecycle, logger } = this.deps;
    const started = Date.now();
    let calls = 0;
    // One call per page (one page unless the upstream pages its lists).
    const { orders: active, unknownStatus, pages } = await client.listActiveOrders();
    calls += pages;
    // GET /reports only saves the GET /status of an order that left the active list and lets
    // stored reports be acknowledged: an answer that fails (not JSON, too large, a 5xx storm)
    // must not stop every order being followed. This cycle goes without it and says so.
    let reports: Awaited<ReturnType<typeof client.pollReportPages>>['reports'] = [];
    let reportsUnread: string | undefined;
    try {
      const read = await client.pollReportPages();
      reports = read.reports;
      calls += read.pages;
    } catch (error) {
      if (!(error instanceof ImagingClientError) || error.code === 'retired') throw error;
      calls++;
      reportsUnread = error.code;
      logger.warn(
        { code: error.code, reason: error.reason },
        'GET /reports not read; this cycle follows orders by the active list and GET /status',
      );
    }
    // Keyed by upstreamOrderIdKey: a UUID in either case is the same order (RFC 9562 §4).
    const unknownById = new Map(
      unknownStatus.map((u) => [upstreamOrderIdKey(u.orderId), u.status]),
    );
    // What the list and the reports say of each order. Two different statuses for one order
    // in one answer say nothing for sure: that order's status is asked with `GET /status`.
    const { byId, listedTwice } = listedStatuses(active);
    // An order off the active list is terminal; a report listed for it names that status
    // (docs/upstream-assumptions.md, `GET /reports`), which saves its `GET /status`.
    const { reported, disagreeing } = reportedStatuses(reports);
    const followed = await this.orders.followed(FOLLOWED_STATES);
    let changed = 0;
    let left = 0;
    let fromReports = 0;
    for (const order of followed) {
      if (lease.lost) throw new Error('poll cycle lease lost: another cycle took over');
      const key = upstreamOrderIdKey(order.upstream_order_id);
      const unknown = unknownById.get(key);
      if (unknown !== undefined) {
        // Still listed (active), with a value we cannot map: left as it was, flagged once.
        await this.flagUnknownStatus(order.id, order.upstream_order_id, unknown);
        continue;
      }
      const listed = byId.get(key);
      const twice = listedTwice.get(key);
      const disagree = listed ? undefined : disagreeing.get(key);
      if (twice || disagree) {
        await this.flagInconsistent(
          order.id,
          twice
            ? `GET /list-orders listed the order twice, as ${twice.join(' and ')}`
            : `GET /reports named two outcomes of the order, ${disagree!.join(' and ')}`,
          'its status is asked with GET /status instead',
          { upstreamOrderId: order.upstream_order_id, statuses: twice ?? disagree },
        );
      }
      let status: UpstreamStatus;
      let qcBypassPossible: boolean;
      if (listed && !twice) {
        if (listed.status === order.upstream_status) continue;
        status = listed.status;
        // Listed QC_FAILED is still active: a clinician can still bypass it.
        qcBypassPossible = true;
      } else if (reported.has(key) && !disagree && !twice) {
        left++;
        fromReports++;
        status = reported.get(key)!;
        qcBypassPossible = false;
        if (status === order.upstream_status) continue;
      } else {
        left++;
        try {
          calls++;
          status = (await client.getStatus({ orderId: order.upstream_order_id })).status;
        } catch (error) {
          if (error instanceof ImagingClientError && error.code === 'not_found' && !twice) {
            // Gone upstream (not listed, 404): it will never report again.
            await lifecycle.endLocally(
              order.id,
              'failed',
              'the upstream no longer knows the order (not listed, GET /status 404)',
              'upstream-unknown',
            );
            changed++;
            continue;
          }
          if (error instanceof ImagingClientError && error.code === 'invalid_response') {
            // An answer that is not about this order (or not an answer): this order is left as
            // it was, the others are still followed, and the next cycle asks again.
            await this.flagInconsistent(
              order.id,
              `GET /status: ${error.reason}`,
              'the order is left as it was',
              { upstreamOrderId: order.upstream_order_id },
            );
            continue;
          }
          throw error;
        }
        // Off the active list, QC_FAILED is final (docs/upstream-assumptions.md, "active");
        // listed (twice), it is still active.
        qcBypassPossible = twice !== undefined;
        if (status === order.upstream_status && status !== 'QC_FAILED') continue;
      }
      try {
        if (await lifecycle.applyUpstreamStatus(order.id, status, { qcBypassPossible })) changed++;
      } catch (error) {
        // One order's problem must not stop the others being followed.
        logger.error(
          { orderId: order.id, err: (error as Error).message },
          'upstream status not applied',
        );
      }
    }
    const ack = await this.acknowledgeStored(reports);
    if (ack.called) calls++;
    const acked = ack.acknowledged;
    const stats: PollCycleStats = {
      startedAt: new Date(started).toISOString(),
      durationMs: Date.now() - started,
      upstreamCalls: calls,
      followed: followed.length,
      changed,
      leftActiveList: left,
      statusFromReports: fromReports,
      reportsListed: reports.length,
      reportsAcknowledged: acked,
      unknownStatus: unknownStatus.length,
      ...(reportsUnread ? { reportsUnread } : {}),
    };
    pollCycleCalls.set(calls);
    pollCycleFollowed.set(followed.length);
    pollCycleSeconds.observe(stats.durationMs / 1000);
    logger.info({ poll: stats }, 'upstream poll cycle');
    return stats;
  }

  /**
   * An order listed with a status value the contract does not name: the order keeps its state
   * (no mapping row can say what the value means clinically), and the analyst sees it on the
   * order's timeline — once per value, not every cycle — with a warning and a metric.
   */
  private async flagUnknownStatus(
    orderId: string,
    upstreamOrderId: string,
    status: string,
  ): Promise<void> {
    upstreamUnknownStatus.inc();
    const events = this.events;
    await this.deps.dataSource.transaction(async (manager) => {
      // One flag per order and value, also when two replicas meet here.
      const first = await events.firstOfItsKind(
        { orderId, kind: 'upstream.unknown-status', detailKey: 'status', detailValue: status },
        manager,
      );
      if (!first) return;
      this.deps.logger.warn(
        { orderId, status },
        'upstream listed an order with an unknown status; the order is left as it was',
      );
      await events.write(
        [
          {
            kind: 'upstream.unknown-status',
            orderId,
            severity: 'warning',
            actor: 'adapter',
            summary: `GET /list-orders named status "${status}", which the contract does not know: the order is left as it was until a known status arrives`,
            detail: { status, upstreamOrderId },
          },
        ],
        manager,
      );
    });
  }

  /**
   * The upstream said something of an order that cannot all be true (two statuses at once, an
   * answer about another order): nothing of it is applied, and the analyst reads why on the
   * order's timeline — once per finding, not every cycle — with a warning.
   */
  private async flagInconsistent(
    orderId: string,
    finding: string,
    consequence: string,
    detail: Record<string, unknown>,
  ): Promise<void> {
    const events = this.events;
    await this.deps.dataSource.transaction(async (manager) => {
      const first = await events.firstOfItsKind(
        { orderId, kind: 'upstream.inconsistent', detailKey: 'finding', detailValue: finding },
        manager,
      );
      if (!first) return;
      this.deps.logger.warn({ orderId }, 'the upstream contradicted itself about an order');
      await events.write(
        [
          {
            kind: 'upstream.inconsistent',
            orderId,
            severity: 'warning',
            actor: 'adapter',
            summary: `${finding}: ${consequence}`,
            detail: { finding, ...detail },
          },
        ],
        manager,
      );
    });
  }

  /**
   * `POST /reports` only for reports whose documents are stored in `order_documents` (our
   * publications are built from them): an acknowledged report is never fetched again, so it
   * must be durable here first.
   */
  private async acknowledgeStored(
    reports: Array<{ report_id: string; order_id?: string; [key: string]: unknown }>,
  ): Promise<{ called: boolean; acknowledged: number }> {
    const none = { called: false, acknowledged: 0 };
    const candidates = reports.filter((r) => r.order_id);
    if (candidates.length === 0) return none;
    // A report may name our order in another case than the create answered (a UUID is the
    // same in either, RFC 9562 §4): both canonical forms are looked up, compared by key.
    const rows = await this.documents.storedKindsOfUpstreamOrders([
      ...new Set(
        candidates.flatMap((r) => [
          r.order_id!,
          r.order_id!.toLowerCase(),
          r.order_id!.toUpperCase(),
        ]),
      ),
    ]);
    const stored = new Set(rows.map((r) => `${upstreamOrderIdKey(r.upstream_order_id)}|${r.kind}`));
    const ids = candidates
      .filter((r) => {
        const kind = REPORT_KIND[String(r.kind ?? 'results')] ?? 'results';
        return stored.has(`${upstreamOrderIdKey(r.order_id!)}|${kind}`);
      })
      .map((r) => r.report_id);
    if (ids.length === 0) return none;
    const result = await this.deps.client.acknowledgeReports(ids);
    return { called: true, acknowledged: result.acknowledged };
  }
}
