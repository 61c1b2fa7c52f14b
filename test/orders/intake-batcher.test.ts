import { uuidv7 } from '../../src/common/uuid-v7';
import { IntakeBatcher, type BatchItem } from '../../src/orders/intake-batcher';
import { createTestDatabase, type TestDatabase } from '../helpers/database';

/** The group commit of the ingest fast path, against real PostgreSQL. */
describe('IntakeBatcher (intake_accept_batch)', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await db?.drop();
  });

  function item(placer: string, key = `key-${placer}`, id = uuidv7()): BatchItem {
    const orderId = uuidv7();
    return {
      id,
      sender: 'RIS^NORTH',
      placers: [placer],
      transport: 'mllp',
      remoteAddress: '127.0.0.1',
      messageType: 'ORM^O01',
      messageControlId: key,
      idempotencyKey: key,
      contentType: 'application/hl7-v2',
      raw: Buffer.from(`MSH|^~\\&|RIS|NORTH|||||ORM^O01|${key}|P|2.3.1\r`),
      quirks: '[]',
      response: Buffer.from('MSH|^~\\&|||RIS|NORTH||ACK|a|P|2.3.1\rMSA|AA|x\r'),
      responseCode: 'AA',
      responseContentType: 'application/hl7-v2',
      orders: JSON.stringify([
        {
          id: orderId,
          source: 'hl7v2',
          placer_order_number: placer,
          request: { placerOrderNumber: { value: placer } },
        },
      ]),
      mappingVersion: 'test',
      audit: JSON.stringify([{ kind: 'order.created', orderId, summary: 'created' }]),
      jobs: JSON.stringify([
        { task: 'order.place-upstream', payload: { orderId }, job_key: `place:${orderId}` },
      ]),
    };
  }

  const orders = async (placer: string) =>
    Number(
      (
        await db.dataSource.query(
          `SELECT count(*)::int AS n FROM orders WHERE placer_order_number = $1`,
          [placer],
        )
      )[0].n,
    );

  it('stores through a named prepared statement on the pool: parsed and planned once per connection', async () => {
    // a DataSource of its own with one connection, so the statement's session is the one asked
    const { createDataSource } = await import('../../src/persistence/data-source.factory');
    const single = createDataSource({ url: db.url, poolSize: 1 });
    await single.initialize();
    try {
      const batcher = new IntakeBatcher(single);
      expect(await batcher.submit(item('P-1'))).toBe('accepted');
      expect(await batcher.submit(item('P-2'))).toBe('accepted');
      const prepared: Array<{ name: string }> = await single.query(
        `SELECT name FROM pg_prepared_statements WHERE name = 'intake_accept_batch'`,
      );
      expect(prepared.map((p) => p.name)).toEqual(['intake_accept_batch']);
    } finally {
      await single.destroy();
    }
    expect([await orders('P-1'), await orders('P-2')]).toEqual([1, 1]);
  });

  it('answers each message of a batch on its own: accepted, duplicate key, known placer', async () => {
    const batcher = new IntakeBatcher(db.dataSource, { maxInFlight: 1 });
    const first = batcher.submit(item('B-1')); // sent at once, alone
    // these queue behind it and are committed together
    const answers = await Promise.all([
      first,
      batcher.submit(item('B-2')),
      batcher.submit(item('B-4', 'key-B-2')), // an idempotency key already accepted
      batcher.submit(item('B-1', 'key-B-1-new')), // B-1 again under a new key: placer known
      batcher.submit(item('B-2')), // a resend: its placer is known first (the general path answers it)
      batcher.submit(item('B-3')),
    ]);
    expect(answers).toEqual([
      'accepted',
      'accepted',
      'duplicate',
      'known-placer',
      'known-placer',
      'accepted',
    ]);
    expect([await orders('B-1'), await orders('B-2'), await orders('B-3')]).toEqual([1, 1, 1]);
    expect(await orders('B-4')).toBe(0);
  });

  it('tries each message alone when the batch fails as a whole, so only the bad one is refused', async () => {
    const batcher = new IntakeBatcher(db.dataSource, { maxInFlight: 1 });
    const first = batcher.submit(item('F-0'));
    const good1 = batcher.submit(item('F-1'));
    const bad = batcher.submit(item('F-2', 'key-F-2', 'not-a-uuid'));
    const good2 = batcher.submit(item('F-3'));
    await expect(first).resolves.toBe('accepted');
    await expect(good1).resolves.toBe('accepted');
    await expect(bad).rejects.toThrow(/uuid/);
    await expect(good2).resolves.toBe('accepted');
    expect([await orders('F-1'), await orders('F-2'), await orders('F-3')]).toEqual([1, 0, 1]);
    const kept = await db.dataSource.query(
      `SELECT count(*)::int AS n FROM inbound_messages WHERE idempotency_key LIKE 'key-F-%'`,
    );
    expect(kept[0].n).toBe(3);
  });
});
