import { constants } from 'node:fs';
import { access, statfs } from 'node:fs/promises';
import { Controller, Get, Inject, Res } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import type { Response } from 'express';
import type { DataSource } from 'typeorm';
import { Public, Roles } from '../auth/auth.decorators';
import { APP_CONFIG, DATA_SOURCE } from '../common/tokens';
import type { AppConfig } from '../config/app-config';
import { metricsRegistry } from '../observability/metrics';
import { DatabaseHealthRepository } from '../persistence/database-health.repository';
import { DestinationHealthRepository } from '../persistence/destination-health.repository';
import { type DestinationHealth, destinationHealth } from '../outbound/destination-health';
import { outboundSettings } from '../outbound/outbound.settings';
import { UPSTREAM_PROBE } from './health.tokens';
import type { UpstreamHealthSnapshot, UpstreamProbe } from '../domain/upstream-probe.port';
import {
  dependencyUp,
  outboxConsecutiveFailures,
  outboxDeadLetters,
  outboxLastFailure,
  outboxLastSuccess,
  outboxOldestPendingSeconds,
  outboxPending,
} from './health.metrics';

/** How long /health waits for a statement before it says so (database, destinations). */
const CHECK_TIMEOUT_MS = 3000;

@ApiTags('operations')
@Controller()
export class HealthController {
  private readonly database: DatabaseHealthRepository;
  private readonly destinationRepository: DestinationHealthRepository;
  /** The result and alert destinations configured (none when OUTBOUND_ENABLED=false). */
  private readonly destinations: readonly string[];

  constructor(
    @Inject(DATA_SOURCE) dataSource: DataSource,
    @Inject(UPSTREAM_PROBE) private readonly upstream: UpstreamProbe,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
  ) {
    this.database = new DatabaseHealthRepository(dataSource);
    this.destinationRepository = new DestinationHealthRepository(dataSource);
    this.destinations = config.OUTBOUND_ENABLED ? outboundSettings(config).destinations : [];
  }

  /** Liveness and readiness in one: 200 when the database answers, 503 otherwise. */
  @Public()
  @Get('health')
  async health(@Res() res: Response): Promise<void> {
    const { database, upstream, storage, destinations } = await this.checkDependencies();
    const ready = database.status === 'up';
    const status = !ready
      ? 'down'
      : upstream.status === 'up' &&
          storage.status === 'up' &&
          Object.values(destinations).every((d) => d.status === 'up')
        ? 'ok'
        : 'degraded';
    res.status(ready ? 200 : 503).json({
      status,
      live: true,
      ready,
      checks: {
        database: publicCheck(database),
        upstream: publicCheck(upstream),
        storage,
        destinations,
      },
      version: process.env.npm_package_version ?? '0.1.0',
      uptimeSeconds: Math.round(process.uptime()),
    });
  }

  /** Prometheus exposition; a scraper uses an analyst or admin bearer token. */
  @Roles('analyst')
  @Get('metrics')
  async metrics(@Res() res: Response): Promise<void> {
    // The same checks as /health, so that the scrape carries adapter_dependency_up as of now.
    await this.checkDependencies();
    res.type(metricsRegistry.contentType).send(await metricsRegistry.metrics());
  }

  private async checkDependencies(): Promise<{
    database: { status: 'up' | 'down'; latencyMs: number; detail?: string };
    upstream: UpstreamHealthSnapshot;
    storage: StorageCheck;
    destinations: Record<string, DestinationCheck>;
  }> {
    const started = Date.now();
    const destinationsChecked = this.checkDestinations();
    let database: { status: 'up' | 'down'; latencyMs: number; detail?: string };
    try {
      await withTimeout(this.database.ping());
      database = { status: 'up', latencyMs: Date.now() - started };
    } catch (error) {
      database = {
        status: 'down',
        latencyMs: Date.now() - started,
        detail: (error as Error).message,
      };
    }
    const [upstream, storage, destinations] = await Promise.all([
      this.upstream.check(),
      this.storage(),
      destinationsChecked,
    ]);
    dependencyUp.set({ dependency: 'database' }, database.status === 'up' ? 1 : 0);
    dependencyUp.set({ dependency: 'upstream' }, upstream.status === 'up' ? 1 : 0);
    dependencyUp.set({ dependency: 'storage' }, storage.status === 'up' ? 1 : 0);
    return { database, upstream, storage, destinations };
  }

  /**
   * Each destination we deliver to, from the outbox (two index reads per destination and one
   * row of outbox_destination_state; no call to the peer): `degraded` when its oldest pending
   * delivery is older than OUTBOUND_DEGRADED_AFTER_SECONDS or dead letters wait for a replay.
   * `unknown` when the database did not answer in time. The same figures go to /metrics.
   */
  private async checkDestinations(): Promise<Record<string, DestinationCheck>> {
    const checks: Record<string, DestinationCheck> = {};
    let found: DestinationHealth[];
    try {
      found = await withTimeout(
        destinationHealth(
          this.destinationRepository,
          this.destinations,
          this.config.OUTBOUND_DEGRADED_AFTER_SECONDS,
        ),
      );
    } catch {
      for (const destination of this.destinations) {
        checks[destination] = { status: 'unknown' };
        dependencyUp.set({ dependency: destination }, 0);
      }
      return checks;
    }
    for (const { destination, ...health } of found) {
      checks[destination] = health;
      const labels = { destination };
      dependencyUp.set({ dependency: destination }, health.status === 'up' ? 1 : 0);
      outboxPending.set(labels, health.pending);
      outboxOldestPendingSeconds.set(labels, health.oldestPendingSeconds ?? 0);
      outboxDeadLetters.set(labels, health.deadLetters);
      outboxConsecutiveFailures.set(labels, health.consecutiveFailures);
      outboxLastSuccess.set(labels, unixSeconds(health.lastSuccessAt));
      outboxLastFailure.set(labels, unixSeconds(health.lastFailureAt));
    }
    return checks;
  }

  /**
   * Free space in DATA_DIR, where pushed studies are staged and packaged: a full disk answered
   * every push 503 while /health said ok. Below DATA_DIR_MIN_FREE_BYTES it is `low` (degraded,
   * still ready: orders are stored in the database); an unreadable one is `unknown`. One that
   * cannot be written (a filesystem the kernel remounted read-only after an I/O error) is
   * `read-only`, whatever its free space.
   */
  private async storage(): Promise<StorageCheck> {
    const minFreeBytes = this.config.DATA_DIR_MIN_FREE_BYTES;
    try {
      const fs = await statfs(this.config.DATA_DIR);
      const unwritable = await access(this.config.DATA_DIR, constants.W_OK).then(
        () => undefined,
        (error: NodeJS.ErrnoException) => error.code ?? 'access failed',
      );
      if (unwritable)
        return {
          status: 'read-only',
          minFreeBytes,
          detail: `DATA_DIR cannot be written (${unwritable})`,
        };
      const freeBytes = fs.bavail * fs.bsize;
      return freeBytes < minFreeBytes
        ? {
            status: 'low',
            freeBytes,
            minFreeBytes,
            detail: 'DATA_DIR has less free space than DATA_DIR_MIN_FREE_BYTES',
          }
        : { status: 'up', freeBytes, minFreeBytes };
    } catch (error) {
      return {
        status: 'unknown',
        minFreeBytes,
        detail: (error as NodeJS.ErrnoException).code ?? 'statfs failed',
      };
    }
  }
}

type DestinationCheck = Omit<DestinationHealth, 'destination'> | { status: 'unknown' };

function withTimeout<T>(work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    work,
    new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`timed out after ${CHECK_TIMEOUT_MS / 1000} s`)),
        CHECK_TIMEOUT_MS,
      );
      timer.unref();
    }),
  ]).finally(() => clearTimeout(timer));
}

function unixSeconds(iso: string | null): number {
  return iso === null ? 0 : Math.round(Date.parse(iso) / 1000);
}

interface StorageCheck {
  status: 'up' | 'low' | 'read-only' | 'unknown';
  freeBytes?: number;
  minFreeBytes: number;
  detail?: string;
}

/**
 * /health is public (load balancers carry no token): it names no URL, host or address of a
 * peer (issue #15). The base URL is dropped and error texts keep their words, not addresses.
 */
function publicCheck<T extends { detail?: string; baseUrl?: string }>(
  check: T,
): Omit<T, 'baseUrl'> {
  const { baseUrl: _hidden, ...rest } = check;
  void _hidden;
  if (typeof rest.detail !== 'string') return rest;
  return {
    ...rest,
    detail: rest.detail
      .replace(/[a-z][a-z0-9+.-]*:\/\/\S+/gi, '<url>')
      .replace(/\[[0-9a-f:.]+\](:\d+)?|\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b/gi, '<address>'),
  };
}
