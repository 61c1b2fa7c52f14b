import type { DataSource } from 'typeorm';
import { AuditEventRepository } from '../persistence/audit-event.repository';
import type { CallObserver, CallRecord, ClientLogger } from './ports';

/**
 * One `upstream.call` audit event per logical upstream call: operation, endpoint (an API
 * path, or `<presigned-url>` for storage PUTs: never a URL), status, latency and retries.
 * Written outside the caller's transaction and never awaited by the call: the audit log
 * must not slow down or fail an upstream call.
 */
export class AuditCallObserver implements CallObserver {
  private pending = new Set<Promise<void>>();
  private readonly events: AuditEventRepository;

  constructor(
    private readonly dataSource: DataSource,
    private readonly logger: ClientLogger,
  ) {
    this.events = new AuditEventRepository(dataSource);
  }

  onCall(record: CallRecord): void {
    if (!this.dataSource.isInitialized) return;
    const write = this.write(record)
      .catch((error: unknown) =>
        this.logger.warn(
          { err: (error as Error).message, operation: record.operation },
          'upstream.call audit event not written',
        ),
      )
      .finally(() => this.pending.delete(write));
    this.pending.add(write);
  }

  private async write(record: CallRecord): Promise<void> {
    // The call names the upstream order; the event belongs to our order, so that it shows
    // in the order's timeline on the audit page.
    let orderId: string | null = null;
    if (record.orderId) orderId = await this.events.orderIdOfUpstreamOrder(record.orderId);
    // A call that failed on the token it needed was never sent: said so, not "no answer".
    const answer =
      record.status === null && record.error?.operation
        ? `not sent (${record.error.operation} failed: ${record.error.code})`
        : `${record.status ?? 'no answer'}`;
    await this.events.write([
      {
        kind: 'upstream.call',
        orderId,
        severity: record.outcome === 'success' ? 'info' : 'warning',
        actor: 'adapter',
        summary: `${record.method} ${record.endpoint}${record.storageHost ? ` (${record.storageHost})` : ''} → ${answer} in ${Math.round(record.latencyMs)} ms${record.attempts > 1 ? ` (${record.attempts} attempts)` : ''}`,
        detail: {
          operation: record.operation,
          method: record.method,
          endpoint: record.endpoint,
          storageHost: record.storageHost,
          status: record.status,
          latencyMs: Math.round(record.latencyMs),
          attempts: record.attempts,
          retries: Math.max(0, record.attempts - 1),
          outcome: record.outcome,
          upstreamOrderId: record.orderId,
          error: record.error,
          deprecationWarning: record.deprecationWarning,
        },
      },
    ]);
  }

  /** Waits for the events in flight (shutdown, tests). */
  async flush(): Promise<void> {
    await Promise.all([...this.pending]);
  }
}
