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
import { UPSTREAM_PROBE } from './health.tokens';
import type { UpstreamHealthSnapshot, UpstreamProbe } from '../domain/upstream-probe.port';
import { dependencyUp } from './health.metrics';

@ApiTags('operations')
@Controller()
export class HealthController {
  private readonly database: DatabaseHealthRepository;

  constructor(
    @Inject(DATA_SOURCE) dataSource: DataSource,
    @Inject(UPSTREAM_PROBE) private readonly upstream: UpstreamProbe,
    @Inject(APP_CONFIG)
    private readonly config: Pick<AppConfig, 'DATA_DIR' | 'DATA_DIR_MIN_FREE_BYTES'>,
  ) {
    this.database = new DatabaseHealthRepository(dataSource);
  }

  /** Liveness and readiness in one: 200 when the database answers, 503 otherwise. */
  @Public()
  @Get('health')
  async health(@Res() res: Response): Promise<void> {
    const { database, upstream, storage } = await this.checkDependencies();
    const ready = database.status === 'up';
    const status = !ready
      ? 'down'
      : upstream.status === 'up' && storage.status === 'up'
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
  }> {
    const started = Date.now();
    let database: { status: 'up' | 'down'; latencyMs: number; detail?: string };
    try {
      await Promise.race([
        this.database.ping(),
        new Promise((_, reject) =>
          setTimeout(() => reject(new Error('timed out after 3 s')), 3000).unref(),
        ),
      ]);
      database = { status: 'up', latencyMs: Date.now() - started };
    } catch (error) {
      database = {
        status: 'down',
        latencyMs: Date.now() - started,
        detail: (error as Error).message,
      };
    }
    const [upstream, storage] = await Promise.all([this.upstream.check(), this.storage()]);
    dependencyUp.set({ dependency: 'database' }, database.status === 'up' ? 1 : 0);
    dependencyUp.set({ dependency: 'upstream' }, upstream.status === 'up' ? 1 : 0);
    dependencyUp.set({ dependency: 'storage' }, storage.status === 'up' ? 1 : 0);
    return { database, upstream, storage };
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
