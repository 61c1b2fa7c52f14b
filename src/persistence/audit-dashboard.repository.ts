import { RepositoryBase } from './repository-base';

/**
 * SQL of the audit dashboard (/audit): what happened in the last hour and day, read through
 * indexes only (docs/audit.md, migrations/20261125030000-audit-dashboard.ts). Every read is a
 * time range of one index or one probe per state; nothing scans a table. Independent reads
 * run in parallel on the pool.
 */

export interface DashboardCount {
  key: string;
  hour: number;
  day: number;
}

export interface DashboardMinute {
  /** ISO minute (UTC), e.g. `2026-11-25T03:07:00.000Z`. */
  minute: string;
  count: number;
  /** Messages: refused or errored ones; results: not used. */
  bad: number;
}

export interface OldestWaiting {
  state: string;
  orderId: string;
  createdAt: string;
  accessionNumber: string | null;
}

export interface DashboardData {
  /** When the figures were read (database clock). */
  now: string;
  ordersByState: DashboardCount[];
  ordersBySource: DashboardCount[];
  /** Outbound documents created, per destination and status (`destination status`). */
  outboundByDestination: Array<DashboardCount & { destination: string; status: string }>;
  messagesIn: { hour: number; day: number; refusedHour: number; refusedDay: number };
  messagesPerMinute: DashboardMinute[];
  resultsOut: { hour: number; day: number };
  resultsPerMinute: DashboardMinute[];
  errors: { hour: number; day: number };
  deadLetters: { total: number; day: number };
  oldestWaiting: OldestWaiting[];
  upstreamCalls: {
    /** Calls in the last 60 s, in all and per endpoint (the client-side limits' window). */
    lastMinute: number;
    busiestEndpoint: { endpoint: string; calls: number } | null;
    rateLimitedHour: number;
    failedHour: number;
  };
}

type Row = Record<string, unknown>;

const n = (v: unknown): number => Number(v ?? 0);
const iso = (v: unknown): string => (v instanceof Date ? v.toISOString() : String(v));

export class AuditDashboardRepository extends RepositoryBase {
  /** The dashboard's figures; `waitingStates` are probed for their oldest order each. */
  async read(waitingStates: readonly string[]): Promise<DashboardData> {
    const q = (sql: string, params: unknown[] = []) =>
      this.db().query(sql, params) as Promise<Row[]>;
    const [
      clock,
      orders,
      outbound,
      messages,
      messageMinutes,
      results,
      resultMinutes,
      errors,
      dead,
      oldest,
      calls,
    ] = await Promise.all([
      q(`SELECT now() AS now`),
      // orders_created_idx: the day's orders, counted per state and source
      q(`SELECT state, source, count(*) AS day,
                count(*) FILTER (WHERE created_at >= now() - interval '1 hour') AS hour
           FROM orders WHERE created_at >= now() - interval '1 day'
          GROUP BY state, source`),
      // outbox_created_idx
      q(`SELECT destination, status, count(*) AS day,
                count(*) FILTER (WHERE created_at >= now() - interval '1 hour') AS hour
           FROM outbox WHERE created_at >= now() - interval '1 day'
          GROUP BY destination, status`),
      // inbound_messages_received_at_idx
      q(`SELECT count(*) AS day,
                count(*) FILTER (WHERE received_at >= now() - interval '1 hour') AS hour,
                count(*) FILTER (WHERE outcome NOT IN ('accepted', 'duplicate')) AS refused_day,
                count(*) FILTER (WHERE outcome NOT IN ('accepted', 'duplicate')
                                   AND received_at >= now() - interval '1 hour') AS refused_hour
           FROM inbound_messages WHERE received_at >= now() - interval '1 day'`),
      q(`SELECT date_trunc('minute', received_at) AS minute, count(*) AS count,
                count(*) FILTER (WHERE outcome NOT IN ('accepted', 'duplicate')) AS bad
           FROM inbound_messages WHERE received_at >= date_trunc('minute', now()) - interval '59 minutes'
          GROUP BY 1 ORDER BY 1`),
      // outbox_delivered_idx
      q(`SELECT count(*) AS day,
                count(*) FILTER (WHERE delivered_at >= now() - interval '1 hour') AS hour
           FROM outbox WHERE delivered_at >= now() - interval '1 day'`),
      q(`SELECT date_trunc('minute', delivered_at) AS minute, count(*) AS count, 0 AS bad
           FROM outbox WHERE delivered_at >= date_trunc('minute', now()) - interval '59 minutes'
          GROUP BY 1 ORDER BY 1`),
      // audit_events_errors_time_idx (partial: error events only)
      q(`SELECT count(*) AS day,
                count(*) FILTER (WHERE occurred_at >= now() - interval '1 hour') AS hour
           FROM audit_events
          WHERE severity = 'error' AND occurred_at >= now() - interval '1 day'`),
      // outbox_dead_idx
      q(`SELECT count(*) AS total,
                count(*) FILTER (WHERE updated_at >= now() - interval '1 day') AS day
           FROM outbox WHERE status = 'dead'`),
      // orders_state_created_idx: one probe per waiting state. The states are written into
      // the statement (our own constants, checked): with an array parameter the planner
      // cannot see them and scanned instead of probing (100 ms at 100,000 orders).
      q(
        waitingStates
          .filter((state) => /^[a-z-]+$/.test(state))
          .map(
            (state) => `(SELECT state, id, created_at, accession_number FROM orders
                          WHERE state = '${state}' ORDER BY created_at, id LIMIT 1)`,
          )
          .join(' UNION ALL ') || `SELECT NULL::text AS state WHERE false`,
      ),
      // audit_events_occurred_idx: the upstream calls of the last hour
      q(`SELECT detail->>'endpoint' AS endpoint,
                count(*) FILTER (WHERE occurred_at >= now() - interval '60 seconds') AS minute,
                count(*) FILTER (WHERE (detail->>'status') = '429') AS limited,
                count(*) FILTER (WHERE detail->>'outcome' IS DISTINCT FROM 'success') AS failed
           FROM audit_events
          WHERE occurred_at >= now() - interval '1 hour' AND kind = 'upstream.call'
          GROUP BY 1`),
    ]);

    const byKey = (key: (r: Row) => string): DashboardCount[] => {
      const out = new Map<string, DashboardCount>();
      for (const r of orders) {
        const k = key(r);
        const c = out.get(k) ?? { key: k, hour: 0, day: 0 };
        c.hour += n(r.hour);
        c.day += n(r.day);
        out.set(k, c);
      }
      return [...out.values()].sort((a, b) => b.day - a.day || a.key.localeCompare(b.key));
    };
    const minutes = (rows: Row[]): DashboardMinute[] =>
      rows.map((r) => ({ minute: iso(r.minute), count: n(r.count), bad: n(r.bad) }));
    const busiest = [...calls].sort((a, b) => n(b.minute) - n(a.minute))[0];
    const m = messages[0] ?? {};
    return {
      now: iso(clock[0]?.now),
      ordersByState: byKey((r) => String(r.state)),
      ordersBySource: byKey((r) => String(r.source)),
      outboundByDestination: outbound
        .map((r) => ({
          key: `${String(r.destination)} ${String(r.status)}`,
          destination: String(r.destination),
          status: String(r.status),
          hour: n(r.hour),
          day: n(r.day),
        }))
        .sort((a, b) => a.key.localeCompare(b.key)),
      messagesIn: {
        hour: n(m.hour),
        day: n(m.day),
        refusedHour: n(m.refused_hour),
        refusedDay: n(m.refused_day),
      },
      messagesPerMinute: minutes(messageMinutes),
      resultsOut: { hour: n(results[0]?.hour), day: n(results[0]?.day) },
      resultsPerMinute: minutes(resultMinutes),
      errors: { hour: n(errors[0]?.hour), day: n(errors[0]?.day) },
      deadLetters: { total: n(dead[0]?.total), day: n(dead[0]?.day) },
      oldestWaiting: oldest.map((r) => ({
        state: String(r.state),
        orderId: String(r.id),
        createdAt: iso(r.created_at),
        accessionNumber: (r.accession_number as string | null) ?? null,
      })),
      upstreamCalls: {
        lastMinute: calls.reduce((s, r) => s + n(r.minute), 0),
        busiestEndpoint:
          busiest && n(busiest.minute) > 0
            ? { endpoint: String(busiest.endpoint ?? '?'), calls: n(busiest.minute) }
            : null,
        rateLimitedHour: calls.reduce((s, r) => s + n(r.limited), 0),
        failedHour: calls.reduce((s, r) => s + n(r.failed), 0),
      },
    };
  }
}
