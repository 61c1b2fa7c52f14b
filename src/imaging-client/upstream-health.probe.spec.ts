import type { UpstreamHealthSnapshot, UpstreamProbe } from '../domain/upstream-probe.port';
import type { CallRecord } from './ports';
import { ClientUpstreamProbe } from './upstream-health.probe';
import { UpstreamHealthStatus } from './upstream-health.status';

const BASE = 'http://upstream.example/v1';

function record(overrides: Partial<CallRecord>): CallRecord {
  return {
    operation: 'status',
    method: 'GET',
    endpoint: '/status',
    status: 200,
    latencyMs: 12,
    attempts: 1,
    outcome: 'success',
    ...overrides,
  };
}

describe('/health from the client (ClientUpstreamProbe)', () => {
  const reachability: UpstreamProbe = {
    check: () => Promise.resolve<UpstreamHealthSnapshot>({ status: 'down', baseUrl: BASE }),
  };

  it('asks the reachability probe until the first call', async () => {
    const probe = new ClientUpstreamProbe(new UpstreamHealthStatus(), BASE, reachability);
    expect(await probe.check()).toMatchObject({ status: 'down' });
  });

  it('is up after a success, with the deprecation warning seen on a response', async () => {
    const status = new UpstreamHealthStatus();
    status.onCall(record({ deprecationWarning: 'v1 will be deprecated on 2027-03-01' }));
    const probe = new ClientUpstreamProbe(status, BASE, reachability);
    expect(await probe.check()).toMatchObject({
      status: 'up',
      deprecation: 'v1 will be deprecated on 2027-03-01',
    });
  });

  it('is down when the last call failed for upstream reasons, not for a 404', async () => {
    let t = Date.parse('2026-11-21T09:00:00Z');
    const status = new UpstreamHealthStatus(() => (t += 1000));
    status.onCall(record({}));
    status.onCall(
      record({
        status: 404,
        outcome: 'error',
        error: { code: 'not_found', message: 'unknown order' },
      }),
    );
    const probe = new ClientUpstreamProbe(status, BASE, reachability);
    expect((await probe.check()).status).toBe('up');
    status.onCall(
      record({
        status: 503,
        attempts: 6,
        outcome: 'error',
        error: { code: 'server_error_exhausted', message: 'gave up' },
      }),
    );
    expect(await probe.check()).toMatchObject({
      status: 'down',
      detail: expect.stringContaining('server_error_exhausted'),
    });
  });

  it('says retired, with the migration guide, after a 410', async () => {
    const status = new UpstreamHealthStatus();
    status.onCall(
      record({
        status: 410,
        outcome: 'error',
        error: { code: 'retired', message: 'retired' },
        retirement: { error: 'v1 retired; use v2', migrationGuide: 'https://example.invalid/v2' },
      }),
    );
    const probe = new ClientUpstreamProbe(status, BASE, reachability);
    expect(await probe.check()).toMatchObject({
      status: 'retired',
      migrationGuide: 'https://example.invalid/v2',
    });
  });
});
