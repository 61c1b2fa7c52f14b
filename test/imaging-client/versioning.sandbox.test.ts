import {
  ImagingClientError,
  PrometheusCallObserver,
  combineObservers,
} from '../../src/imaging-client';
import { metricsRegistry } from '../../src/observability/metrics';
import { startFaultyProxy } from './faulty-proxy';
import { buildClient, startTestSandbox } from './sandbox-harness';

describe('versioning: deprecation warning and retirement', () => {
  it('records X-API-Deprecation-Warning in health and as a metric with the date', async () => {
    const peer = await startTestSandbox({ deprecationDate: '2027-02-01' });
    const c = buildClient(peer.sandbox.baseUrl);
    const prometheus = new PrometheusCallObserver();
    const observe = combineObservers(prometheus);
    try {
      await c.client.getProducts();
      for (const record of c.records) observe.onCall(record);
      expect(c.health.snapshot().deprecation).toMatchObject({
        warning: 'v1 will be deprecated on 2027-02-01',
        date: '2027-02-01',
      });
      const text = await metricsRegistry.metrics();
      expect(text).toMatch(
        /adapter_upstream_deprecation_warning\{date="2027-02-01",warning="v1 will be deprecated on 2027-02-01"\} 1/,
      );
      expect(text).toMatch(
        /adapter_upstream_call_seconds_count\{operation="products",status="200"\} 1/,
      );
    } finally {
      await c.close();
      await peer.close();
    }
  });

  it('on 410 reports retired with the migration guide and stops calling', async () => {
    const peer = await startTestSandbox({
      retired: true,
      migrationGuideUrl: 'https://example.invalid/imaging-service/migration/v2',
    });
    const proxy = await startFaultyProxy(peer.sandbox.baseUrl);
    const c = buildClient(proxy.baseUrl);
    try {
      const error = (await c.client.getProducts().catch((e: unknown) => e)) as ImagingClientError;
      expect(error).toBeInstanceOf(ImagingClientError);
      expect(error.code).toBe('retired');
      expect(error.migrationGuide).toBe('https://example.invalid/imaging-service/migration/v2');
      const sent = proxy.hits.length;
      expect(sent).toBeGreaterThan(0);
      for (const call of [
        c.client.listOrders(),
        c.client.getStatus({ orderId: 'x' }),
        c.client.testToken(),
      ]) {
        await expect(call).rejects.toMatchObject({ code: 'retired' });
      }
      expect(proxy.hits.length).toBe(sent);
      expect(c.client.retired?.migrationGuide).toBe(
        'https://example.invalid/imaging-service/migration/v2',
      );
      expect(c.health.snapshot()).toMatchObject({
        state: 'retired',
        retired: { migrationGuide: 'https://example.invalid/imaging-service/migration/v2' },
      });
    } finally {
      await c.close();
      await proxy.close();
      await peer.close();
    }
  });
});
