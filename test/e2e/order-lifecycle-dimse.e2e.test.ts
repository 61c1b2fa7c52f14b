import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client as PgClient } from 'pg';
import { MllpClient } from '../../src/hl7';
import { OrderPollerService } from '../../src/orders/order-poller.service';
import { freePort } from '../../src/persistence/embedded-postgres';
import { startSandbox, type RunningSandbox } from '../../src/sandbox/sandbox';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter';
import { ackSummary } from '../helpers/hl7-fixtures';
import { startOrthanc, type RunningOrthanc } from '../helpers/orthanc';
import {
  newOrderSpec,
  orderByPlacer,
  orderState,
  ormMessage,
  SANDBOX_CLIENT,
  studyFor,
  waitFor,
  writeSiteConfig,
} from './e2e-support';

jest.setTimeout(300_000);

/**
 * The core of order-lifecycle.e2e.test.ts with a PACS that speaks only DIMSE (no
 * DICOMWEB_URL): an ORM^O01 over MLLP, the study found with C-FIND and retrieved with C-MOVE
 * (to the adapter's own C-STORE SCP, registered in Orthanc's DicomModalities) or C-GET,
 * packaged, uploaded to the sandbox upstream, followed to DELIVERED.
 */
describe.each(['move', 'get'] as const)(
  'order lifecycle end to end with a DIMSE-only PACS (C-%s)',
  (retrieve) => {
    const AE = 'IMAGING-ADAPTER';
    let orthanc: RunningOrthanc;
    let sandbox: RunningSandbox;
    let adapter: TestAdapter;
    let mllp: MllpClient;
    let db: PgClient;
    let poller: OrderPollerService;

    beforeAll(async () => {
      const dir = mkdtempSync(join(tmpdir(), 'e2e-dimse-'));
      const scpPort = await freePort();
      orthanc = await startOrthanc({ modalities: { [AE]: { host: '127.0.0.1', port: scpPort } } });
      sandbox = await startSandbox({ port: 0, host: '127.0.0.1', clock: 'manual', dataDir: dir });
      adapter = await startTestAdapter({
        IMAGING_BASE_URL: sandbox.baseUrl,
        ...SANDBOX_CLIENT,
        IMAGING_SANDBOX_OUTCOME_FROM_NOTES: 'true',
        PACS_DIMSE_HOST: '127.0.0.1',
        PACS_DIMSE_PORT: String(orthanc.dicomPort),
        PACS_DIMSE_AE_TITLE: orthanc.aet,
        PACS_DIMSE_RETRIEVE: retrieve,
        DICOM_SCP_AE_TITLE: AE,
        ...(retrieve === 'move' ? { DICOM_SCP_PORT: String(scpPort) } : {}),
        STUDY_QUIET_PERIOD_SECONDS: '1',
        CONFIG_FILE: writeSiteConfig(dir),
        POLL_INTERVAL_SECONDS: '3600',
      });
      mllp = new MllpClient({
        host: '127.0.0.1',
        port: adapter.mllpPort,
        responseTimeoutMs: 10_000,
      });
      db = new PgClient({ connectionString: adapter.db.url });
      await db.connect();
      poller = adapter.app.get(OrderPollerService);
    });
    afterAll(async () => {
      await mllp?.close();
      await db?.end();
      await adapter?.close();
      await sandbox?.close();
      await orthanc?.stop();
    });

    it('places, retrieves over DIMSE, uploads and follows an order to DELIVERED', async () => {
      const spec = newOrderSpec('Bitte KI-Auswertung. sandbox-outcome: delivered');
      const study = studyFor(spec);
      for (const instance of study) await orthanc.store(instance.bytes);
      const ack = ackSummary(await mllp.send(ormMessage(spec)));
      expect(ack.code).toBe('AA');
      const order = await waitFor('the order', () => orderByPlacer(db, spec.placer));
      await waitFor(
        `order ${order.id} uploaded`,
        async () => {
          const s = await orderState(db, order.id);
          if (s === 'failed') {
            const { rows } = await db.query(
              `SELECT summary FROM audit_events WHERE order_id = $1 ORDER BY id`,
              [order.id],
            );
            throw new Error(`order failed: ${rows.map((r) => r.summary).join(' | ')}`);
          }
          return s === 'processing';
        },
        90_000,
      );
      const { rows: packaged } = await db.query(
        `SELECT detail FROM audit_events WHERE order_id = $1 AND kind = 'study.packaged'`,
        [order.id],
      );
      expect(packaged[0].detail).toMatchObject({
        source: 'dimse',
        retrieve: retrieve === 'move' ? 'C-MOVE' : 'C-GET',
        instances: study.length,
      });
      for (let i = 0; i < 40 && (await orderState(db, order.id)) !== 'delivered'; i++) {
        await sandbox.advance(5_000);
        await poller.runNow();
      }
      expect(await orderState(db, order.id)).toBe('delivered');
    });
  },
);
