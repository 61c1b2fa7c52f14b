import type { UpstreamHealthSnapshot, UpstreamProbe } from '../domain/upstream-probe.port';
import type { UpstreamHealthStatus } from './upstream-health.status';

/**
 * /health's upstream part from what the client has seen on real calls (retirement with its
 * migration guide, deprecation, last success or failure). Before the first call it asks the
 * reachability probe, so a fresh replica still reports a down upstream.
 */
export class ClientUpstreamProbe implements UpstreamProbe {
  constructor(
    private readonly status: UpstreamHealthStatus,
    private readonly baseUrl: string,
    private readonly fallback: UpstreamProbe,
  ) {}

  async check(): Promise<UpstreamHealthSnapshot> {
    const s = this.status.snapshot();
    const common = {
      baseUrl: this.baseUrl,
      deprecation: s.deprecation?.warning,
      checkedAt: new Date().toISOString(),
    };
    switch (s.state) {
      case 'retired':
        return {
          ...common,
          status: 'retired',
          migrationGuide: s.retired?.migrationGuide,
          detail: `the upstream answers 410 (version retired) since ${s.retired?.since ?? '?'}`,
        };
      case 'degraded':
        return {
          ...common,
          status: 'down',
          detail: `last ${s.lastError?.operation ?? 'call'} failed (${s.lastError?.code ?? 'error'}) at ${s.lastError?.at ?? '?'}`,
        };
      case 'ok':
        return { ...common, status: 'up', detail: `last success ${s.lastSuccessAt ?? ''}` };
      case 'unknown': {
        const probed = await this.fallback.check();
        return { ...probed, deprecation: probed.deprecation ?? common.deprecation };
      }
      default:
        return s.state satisfies never;
    }
  }
}
