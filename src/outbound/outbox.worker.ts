import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { DataSource } from 'typeorm';
import { AlertCoalescingRepository } from '../persistence/alert-coalescing.repository';
import { DestinationHealthRepository } from '../persistence/destination-health.repository';
import { OutboxRepository } from '../persistence/outbox.repository';
import { PublicationRepository } from '../persistence/publication.repository';
import { isDatabaseUnavailable } from '../common/database-unavailable';
import type { Destination, OutboundSettings } from './outbound.settings';
import type { OutboxPayload } from './outbox-order-events';
import { type AttemptDeps, attemptDelivery, type ClaimedRow } from './outbox-attempt';
import { recordAttempt, type RecordDeps } from './outbox-record';
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
  private readonly attemptDeps: AttemptDeps;
  private readonly recordDeps: RecordDeps;

  constructor(private readonly options: OutboxWorkerOptions) {
    const { dataSource, settings, logger } = options;
    this.outbox = new OutboxRepository(dataSource);
    this.attemptDeps = {
      outbox: this.outbox,
      publications: new PublicationRepository(dataSource),
      settings,
    };
    this.recordDeps = {
      dataSource,
      outbox: this.outbox,
      destinationHealth: new DestinationHealthRepository(dataSource),
      alertCoalescing: new AlertCoalescingRepository(dataSource),
      settings,
      logger,
    };
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
    const result = await attemptDelivery(this.attemptDeps, publisher, row);
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
        await recordAttempt(this.recordDeps, row, result);
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
}
