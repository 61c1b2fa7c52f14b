import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { DataSource } from 'typeorm';
import { writeAuditEvents } from '../persistence/audit-event.repository';
import { type ClaimedOutboxRow, OutboxRepository } from '../persistence/outbox.repository';
import { PublicationRepository } from '../persistence/publication.repository';
import { isDatabaseUnavailable } from '../common/database-unavailable';
import { OutboundError } from './outbound.error';
import { outboundAttemptsTotal, outboundDeliverySeconds } from './outbound.metrics';
import { deadLetterPayload } from './alert-webhook.publisher';
import {
  backoffMs,
  DESTINATIONS,
  type Destination,
  type OutboundSettings,
} from './outbound.settings';
import type { OutboxPayload } from './outbox-order-events';
import { loadPublication } from './publication.loader';
import type { DeliveryResult, Publisher } from './publisher';

export interface OutboxWorkerOptions {
  dataSource: DataSource;
  settings: OutboundSettings;
  publishers: Publisher[];
  logger: Logger;
  pollMs: number;
  /** Rows delivered at once per destination (each of a different order). */
  concurrency: number;
  /**
   * How long a claim holds a row without renewal (default `OUTBOX_CLAIM_LEASE_MS`): the
   * claiming worker renews it every third of this while it delivers, so a slow delivery
   * keeps its row and a killed worker's rows are taken by another within about this time.
   */
  leaseMs?: number;
}

/** Default claim lease: what a killed worker's rows wait before another worker takes them. */
export const OUTBOX_CLAIM_LEASE_MS = 30_000;

/** A late record is not tried this close to the end of our lease (at most a third of it). */
const RECORD_LEASE_MARGIN_MS = 10_000;

type ClaimedRow = ClaimedOutboxRow<OutboxPayload> & { destination: Destination };

/**
 * Drains the outbox: one claim loop per destination in every replica. A claim takes, per
 * (order, destination), only the lowest pending row, and only when it is due, under
 * `FOR UPDATE SKIP LOCKED`; it leases the row by pushing `next_attempt_at` forward and
 * counting the attempt, so two replicas never send the same row and a later row of the same
 * order waits until the earlier one is delivered or dead (order per order). A crashed
 * worker's lease lapses and the row is taken again. Dead rows do not block later ones: the
 * latest status still reaches the clinic, and the dead one waits for an analyst's replay
 * (audit API), which sets it pending and due; the loop picks it up like any other row.
 */
export class OutboxWorker {
  private running = false;
  /** This worker's claims carry it (`outbox.claimed_by`). */
  private readonly workerId = randomUUID();
  private readonly wakers = new Map<Destination, () => void>();
  private readonly loops: Promise<void>[] = [];
  /** Rows being delivered by this worker → when their lease was last pushed (performance.now()). */
  private readonly leasedAt = new Map<string, number>();
  private renewTimer?: NodeJS.Timeout;
  private renewing?: Promise<void>;
  private readonly outbox: OutboxRepository;
  private readonly publications: PublicationRepository;

  constructor(private readonly options: OutboxWorkerOptions) {
    this.outbox = new OutboxRepository(options.dataSource);
    this.publications = new PublicationRepository(options.dataSource);
  }

  private get leaseMs(): number {
    return this.options.leaseMs ?? OUTBOX_CLAIM_LEASE_MS;
  }

  /** What this worker writes into `outbox.claimed_by`. */
  get id(): string {
    return this.workerId;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    for (const p of this.options.publishers) this.loops.push(this.loop(p));
    this.renewTimer = setInterval(
      () => {
        if (!this.renewing)
          this.renewing = this.renewLeases().finally(() => (this.renewing = undefined));
      },
      Math.max(50, Math.floor(this.leaseMs / 3)),
    );
    this.renewTimer.unref();
  }

  /** Look for due rows now (called after a transaction wrote some). */
  kick(): void {
    for (const wake of this.wakers.values()) wake();
  }

  async stop(): Promise<void> {
    this.running = false;
    this.kick();
    await Promise.all(this.loops);
    clearInterval(this.renewTimer);
    await this.renewing;
    await Promise.all(this.options.publishers.map((p) => p.close()));
  }

  /**
   * Keeps up to `concurrency` deliveries in flight: claims as many rows as there are free
   * slots, and claims again as soon as one finishes (the next row of that order may now be
   * due), on a kick, or after the poll interval.
   */
  private async loop(publisher: Publisher): Promise<void> {
    const inFlight = new Set<Promise<void>>();
    /** A claim or a record failed: some of our claims may be held by no delivery. */
    let claimsInDoubt = false;
    let woken: boolean;
    let wake: () => void = () => {
      woken = true;
    };
    this.wakers.set(publisher.destination, () => wake());
    while (this.running) {
      woken = false;
      if (claimsInDoubt) {
        claimsInDoubt = !(await this.releaseLostClaims(publisher.destination));
      }
      const free = this.options.concurrency - inFlight.size;
      let claimed: ClaimedRow[] = [];
      if (free > 0) {
        try {
          claimed = await this.claim(publisher.destination, free);
        } catch (error) {
          // The claim may have committed with its answer lost (the database restarted).
          claimsInDoubt = true;
          this.options.logger.warn(
            { destination: publisher.destination, err: (error as Error).message },
            'outbox claim failed',
          );
        }
      }
      for (const row of claimed) {
        const delivery: Promise<void> = this.deliver(publisher, row)
          .catch((error: unknown) => {
            claimsInDoubt = true;
            this.options.logger.warn(
              { outboxId: row.id, destination: row.destination, err: (error as Error).message },
              'outbox delivery not recorded (the row is tried again)',
            );
          })
          .finally(() => {
            inFlight.delete(delivery);
            wake();
          });
        inFlight.add(delivery);
      }
      if (free > 0 && claimed.length === free) continue;
      if (woken || !this.running) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, this.options.pollMs);
        function done() {
          clearTimeout(timer);
          resolve();
        }
        wake = () => {
          wake = () => {
            woken = true;
          };
          done();
        };
      });
    }
    await Promise.all(inFlight);
  }

  /**
   * Pushes the lease of every row this worker is delivering (all destinations, one
   * statement). A row no longer ours (our lease lapsed during a database outage and another
   * worker claimed it) is left alone; the record's guard then keeps our late answer out.
   */
  private async renewLeases(): Promise<void> {
    if (this.leasedAt.size === 0) return;
    const ids = [...this.leasedAt.keys()];
    const startedAt = performance.now();
    try {
      const renewed = await this.outbox.renewLeases(ids, this.workerId, this.leaseMs);
      for (const id of renewed) if (this.leasedAt.has(id)) this.leasedAt.set(id, startedAt);
    } catch (error) {
      this.options.logger.warn(
        { rows: ids.length, err: (error as Error).message },
        'outbox claim lease not renewed (tried again shortly)',
      );
    }
  }

  /** Claims and delivers one batch for a destination; resolves with how many rows it handled. */
  async drainOnce(publisher: Publisher): Promise<number> {
    const claimed = await this.claim(publisher.destination, this.options.concurrency);
    await Promise.all(claimed.map((row) => this.deliver(publisher, row)));
    return claimed.length;
  }

  /**
   * Makes due again the rows this worker claimed that none of its deliveries holds (not in
   * `leasedAt`): claims committed while their answer was lost, and deliveries whose record
   * failed. Without this they waited for their lease. Returns false when the database could
   * not be asked.
   */
  private async releaseLostClaims(destination: Destination): Promise<boolean> {
    try {
      const released = await this.outbox.releaseClaims(destination, this.workerId, [
        ...this.leasedAt.keys(),
      ]);
      if (released.length > 0)
        this.options.logger.warn(
          { destination, released: released.length },
          'outbox rows whose claim or record a database outage cut are due again',
        );
      return true;
    } catch {
      return false;
    }
  }

  private async claim(destination: Destination, limit: number): Promise<ClaimedRow[]> {
    const leaseMs = this.leaseMs;
    const claimedAt = performance.now();
    const rows = (await this.outbox.claimDue<OutboxPayload>(
      destination,
      limit,
      leaseMs,
      this.workerId,
    )) as ClaimedRow[];
    for (const row of rows) this.leasedAt.set(row.id, claimedAt);
    return rows;
  }

  private async deliver(publisher: Publisher, row: ClaimedRow): Promise<void> {
    try {
      await this.deliverLeased(publisher, row);
    } finally {
      this.leasedAt.delete(row.id);
    }
  }

  private async deliverLeased(publisher: Publisher, row: ClaimedRow): Promise<void> {
    let result: DeliveryResult;
    try {
      const superseded = await this.supersededBy(row);
      if (superseded) {
        result = {
          outcome: 'delivered',
          answer: `not sent: superseded by the later ${row.kind} ${superseded} already delivered`,
          detail: { supersededBy: superseded },
        };
      } else if (publisher.deliverPayload) {
        result = await publisher.deliverPayload(
          { id: row.id, kind: row.kind, attempts: row.attempts },
          row.payload,
        );
      } else {
        const loaded = await loadPublication(this.publications, this.options.settings, row.payload);
        result = await publisher.deliver(
          { id: row.id, kind: row.kind, attempts: row.attempts },
          loaded,
        );
      }
    } catch (error) {
      result =
        error instanceof OutboundError
          ? {
              outcome: 'dead',
              answer: error.message,
              detail: { code: error.code, ...error.detail },
            }
          : {
              outcome: 'retry',
              answer: `delivery failed: ${(error as Error).name}`,
              detail: { error: (error as Error).message.slice(0, 300) },
            };
    }
    await this.recordWhileLeased(row, result);
  }

  /**
   * Records the attempt. When the database is away (restarting, in recovery), tries again
   * until it is back — not beyond our lease (from its last renewal: none goes through while
   * the database is away), after which another worker may take the row — so that a document
   * already delivered is recorded as such instead of being sent again.
   */
  private async recordWhileLeased(row: ClaimedRow, result: DeliveryResult): Promise<void> {
    const margin = Math.min(RECORD_LEASE_MARGIN_MS, this.leaseMs / 3);
    const leaseEnd = () => (this.leasedAt.get(row.id) ?? 0) + this.leaseMs - margin;
    for (let delay = 250; ; delay = Math.min(delay * 2, 5_000)) {
      try {
        await this.record(row, result);
        return;
      } catch (error) {
        if (
          !isDatabaseUnavailable(error) ||
          !this.running ||
          performance.now() + delay > leaseEnd()
        )
          throw error;
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }

  /**
   * A replayed Task update or ORM status older than one already delivered would move the
   * clinic's view backwards: it is marked delivered without sending.
   */
  private async supersededBy(row: ClaimedRow): Promise<string | null> {
    if (row.kind !== 'fhir-task' && row.kind !== 'hl7-orm-status') return null;
    return this.outbox.deliveredLaterThan({
      id: row.id,
      orderId: row.order_id,
      destination: row.destination,
      kind: row.kind,
    });
  }

  private async record(row: ClaimedRow, result: DeliveryResult): Promise<void> {
    const { settings } = this.options;
    let outcome = result.outcome;
    let reason = result.answer;
    if (outcome === 'retry' && row.attempts >= settings.maxAttempts) {
      outcome = 'dead';
      reason = `gave up after ${row.attempts} attempts; last answer: ${result.answer}`;
    }
    const delay = outcome === 'retry' ? backoffMs(settings, row.attempts) : 0;
    const recorded = await this.options.dataSource.transaction(async (manager) => {
      // Only while the claim is still ours (pending, attempt count as we claimed it): a record
      // tried again after the database came back, or after our lease lapsed and another
      // replica claimed the row, changes nothing and writes no second audit entry.
      let updated: boolean;
      if (outcome === 'delivered') {
        updated = await this.outbox.markDelivered(row.id, row.attempts, manager);
      } else if (outcome === 'retry') {
        updated = await this.outbox.scheduleRetry(row.id, row.attempts, delay, reason, manager);
      } else {
        updated = await this.outbox.markDead(row.id, row.attempts, reason, manager);
      }
      if (!updated) return false;
      if (result.sent || result.response) {
        await this.outbox.recordExchange(
          row.id,
          {
            attempt: row.attempts,
            at: new Date().toISOString(),
            outcome,
            ...(result.sent ? { sent: result.sent } : {}),
            ...(result.response ? { answer: result.response } : {}),
          },
          manager,
        );
      }
      const base = {
        outboxId: row.id,
        destination: row.destination,
        documentKind: row.kind,
        attempt: row.attempts,
        mappingRow: row.payload.rowKey,
        mappingVersion: row.payload.mappingVersion,
      };
      const events: Parameters<typeof writeAuditEvents>[1][number][] = [
        {
          kind: 'outbound.attempt',
          orderId: row.order_id,
          actor: 'adapter',
          severity: outcome === 'delivered' ? 'info' : outcome === 'retry' ? 'warning' : 'error',
          summary: `${row.kind} to ${row.destination}, attempt ${row.attempts}: ${result.answer}${outcome === 'retry' ? ` (retry in ${Math.round(delay / 1000)} s)` : ''}`,
          detail: { ...base, outcome, answer: result.answer, ...result.detail },
        },
      ];
      if (outcome === 'dead') {
        events.push({
          kind: 'outbound.dead-letter',
          orderId: row.order_id,
          actor: 'adapter',
          severity: 'error',
          summary: `${row.kind} to ${row.destination} dead-lettered: ${reason}`,
          detail: { ...base, reason },
        });
      }
      await writeAuditEvents(manager, events);
      // A person hears about a dead letter (ALERT_WEBHOOK_URL), on the same transaction; the
      // webhook's own dead letters are only on the audit page (no alert about an alert).
      if (
        outcome === 'dead' &&
        row.order_id &&
        row.destination !== DESTINATIONS.alert &&
        settings.destinations.includes(DESTINATIONS.alert)
      ) {
        await this.outbox.insert(
          [
            {
              orderId: row.order_id,
              destination: DESTINATIONS.alert,
              kind: 'dead-letter',
              dedupeKey: `dead-letter:${row.id}:${row.attempts}`,
              payload: deadLetterPayload({
                orderId: row.order_id,
                outboxId: row.id,
                destination: row.destination,
                documentKind: row.kind,
                reason,
              }),
            },
          ],
          manager,
        );
      }
      return true;
    });
    if (!recorded) return;
    outboundAttemptsTotal.inc({ destination: row.destination, kind: row.kind, outcome });
    if (outcome === 'delivered') {
      outboundDeliverySeconds.observe(
        { destination: row.destination },
        (Date.now() - new Date(row.created_at).getTime()) / 1000,
      );
    }
    if (outcome === 'dead') {
      this.options.logger.error(
        { outboxId: row.id, destination: row.destination, kind: row.kind },
        'outbound document dead-lettered',
      );
    }
  }
}
