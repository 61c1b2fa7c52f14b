import { Controller, Get, Inject, Res } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import type { Response } from 'express';
import type { DataSource } from 'typeorm';
import { Public, Roles } from '../auth/auth.decorators';
import { DATA_SOURCE } from '../common/tokens';
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
  ) {
    this.database = new DatabaseHealthRepository(dataSource);
  }

  /** Liveness and readiness in one: 200 when the database answers, 503 otherwise. */
  @Public()
  @Get('health')
  async health(@Res() res: Response): Promise<void> {
    const { database, upstream } = await this.checkDependencies();
    const ready = database.status === 'up';
    const status = !ready ? 'down' : upstream.status === 'up' ? 'ok' : 'degraded';
    res.status(ready ? 200 : 503).json({
      status,
      live: true,
      ready,
      checks: { database: publicCheck(database), upstream: publicCheck(upstream) },
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
    const upstream = await this.upstream.check();
    dependencyUp.set({ dependency: 'database' }, database.status === 'up' ? 1 : 0);
    dependencyUp.set({ dependency: 'upstream' }, upstream.status === 'up' ? 1 : 0);
    return { database, upstream };
  }
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
