import { Client } from 'pg';
import { createDataSource } from '../../src/persistence/data-source.factory';
import { migrateUnderLock, revertLastMigration } from '../../src/persistence/migrator';
import { MIGRATIONS } from '../../migrations';
import { createEmptyDatabase } from '../helpers/database';

jest.setTimeout(120_000);

/**
 * An order stored before identifiers were composed on intake (src/domain/identifier-form.ts),
 * as its sender wrote it (NFD), must still be found by that sender's next message, which the
 * intake now composes: the migration composes its identifier columns and the identifiers of its
 * request, and nothing else of it (a name keeps the form it came in).
 */
describe('migration NfcOrderIdentifiers', () => {
  it('composes the identifiers of orders and held instances stored decomposed', async () => {
    const db = await createEmptyDatabase();
    const ds = createDataSource({ url: db.url, poolSize: 2 });
    await ds.initialize();
    const c = new Client({ connectionString: db.url });
    try {
      await migrateUnderLock(ds, db.url);
      expect(MIGRATIONS[MIGRATIONS.length - 1]!.name).toMatch(/NfcOrderIdentifiers/);
      await revertLastMigration(ds, db.url);
      await c.connect();
      const d = (s: string) => s.normalize('NFD');
      const request = {
        source: 'hl7v2',
        action: 'create',
        patient: {
          identifiers: [
            { value: d('7800123-É'), system: d('CHU_LYON_É'), type: 'PI' },
            { value: '1850775123456', system: 'INSEE' },
          ],
          name: { family: d('DUBOIS'), given: [d('HÉLÈNE')] },
        },
        placerOrderNumber: { value: d('DP-ÉCHO-1'), system: 'OF_RIS' },
        fillerOrderNumber: { value: d('RQ-É1') },
        accessionNumber: d('A-ÉCHO-1'),
        accessionIssuer: { namespace: d('OF_RIS_É') },
        notes: [d('fièvre')],
        products: ['x'],
      };
      const [{ id }] = (
        await c.query(
          `INSERT INTO orders (source, state, placer_order_number, filler_order_number, accession_number,
                               patient_id, request, retired_patient_identifiers)
           VALUES ('hl7v2', 'received', $1, $2, $3, $4, $5::jsonb, $6::jsonb) RETURNING id`,
          [
            d('DP-ÉCHO-1'),
            d('RQ-É1'),
            d('A-ÉCHO-1'),
            d('7800123-É'),
            JSON.stringify(request),
            JSON.stringify([{ value: d('7800-OLD-É') }]),
          ],
        )
      ).rows;
      const plain = (
        await c.query(
          `INSERT INTO orders (source, state, placer_order_number, request)
           VALUES ('api', 'received', 'PLAIN-1', '{"placerOrderNumber":{"value":"PLAIN-1"},"x":null}'::jsonb)
           RETURNING id, updated_at`,
        )
      ).rows[0];
      await migrateUnderLock(ds, db.url);
      const [row] = (await c.query(`SELECT * FROM orders WHERE id = $1`, [id])).rows;
      expect(row).toMatchObject({
        placer_order_number: 'DP-ÉCHO-1'.normalize('NFC'),
        filler_order_number: 'RQ-É1'.normalize('NFC'),
        accession_number: 'A-ÉCHO-1'.normalize('NFC'),
        patient_id: '7800123-É'.normalize('NFC'),
        retired_patient_identifiers: [{ value: '7800-OLD-É'.normalize('NFC') }],
      });
      expect(row.request).toEqual({
        ...request,
        patient: {
          ...request.patient,
          identifiers: [
            {
              value: '7800123-É'.normalize('NFC'),
              system: 'CHU_LYON_É'.normalize('NFC'),
              type: 'PI',
            },
            { value: '1850775123456', system: 'INSEE' },
          ],
        },
        placerOrderNumber: { value: 'DP-ÉCHO-1'.normalize('NFC'), system: 'OF_RIS' },
        fillerOrderNumber: { value: 'RQ-É1'.normalize('NFC') },
        accessionNumber: 'A-ÉCHO-1'.normalize('NFC'),
        accessionIssuer: { namespace: 'OF_RIS_É'.normalize('NFC') },
      });
      // a name and a note keep the form they came in
      expect(row.request.patient.name.given[0]).toBe(d('HÉLÈNE'));
      expect(row.request.notes[0]).toBe(d('fièvre'));
      // an order already composed is not written
      const after = (
        await c.query(`SELECT request, updated_at FROM orders WHERE id = $1`, [plain.id])
      ).rows[0];
      expect(after).toEqual({
        request: { placerOrderNumber: { value: 'PLAIN-1' }, x: null },
        updated_at: plain.updated_at,
      });
    } finally {
      await c.end().catch(() => undefined);
      await ds.destroy();
      await db.drop();
    }
  });
});
