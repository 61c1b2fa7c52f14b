import { startMllpHarness, type MllpHarness } from '../helpers/mllp-harness';
import { ackSummary, hl7Fixture, withControlId } from '../helpers/hl7-fixtures';

/**
 * A resend (same MSH-3/MSH-4/MSH-10) gets the original answer; a different message under a
 * control ID the sender already used (a RIS whose counter restarted) must not: answered with
 * the new order's ACK, a cancel would read as done and never be applied. The IHE SWF ORM^O01
 * (NW) and the v2.5.1 CA fixtures of the same order, both sent under one MSH-10.
 */
describe('MSH-10 reused for a different message', () => {
  let h: MllpHarness;
  beforeAll(async () => {
    h = await startMllpHarness();
  });
  afterAll(() => h?.close());
  const withId = (name: string, id: string): Buffer => withControlId(hl7Fixture(name), id);

  it('is refused AR 205 at MSH-10 and kept; the first message stands; true resends still get the original answer', async () => {
    const order = withId('orm-o01-v231-ihe-swf-zds', 'RIS-0001');
    const first = await h.mllp.send(order);
    expect(ackSummary(first)).toMatchObject({ code: 'AA', controlIdEchoed: 'RIS-0001' });

    // The cancel, under the same control ID (and the same sender, MSH-3/MSH-4).
    const cancel = withId('orm-o01-v251-cancel-ca', 'RIS-0001');
    const refused = await h.mllp.send(cancel);
    expect(ackSummary(refused)).toMatchObject({ code: 'AR', controlIdEchoed: 'RIS-0001' });
    expect(ackSummary(refused).errors.join(' ')).toMatch(
      /MSH\^1\^10\^1\|205\^Duplicate key identifier/,
    );
    expect(refused.toString('latin1')).toMatch(/already used by this sender/);

    const rows = await h.db.query<{ outcome: string; raw: Buffer }>(
      `SELECT outcome, raw FROM inbound_messages WHERE message_control_id = 'RIS-0001' ORDER BY received_at`,
    );
    expect(rows.rows.map((r) => r.outcome)).toEqual(['accepted', 'rejected']);
    expect(rows.rows[1]!.raw.equals(cancel)).toBe(true);
    const orders = await h.db.query<{ cancel_requested_at: Date | null }>(
      `SELECT cancel_requested_at FROM orders WHERE placer_order_number = 'PLC-100234'`,
    );
    expect(orders.rows).toEqual([{ cancel_requested_at: null }]);

    // A resend byte for byte, and one re-stamped (MSH-7) with LF separators: the original ACK.
    expect((await h.mllp.send(order)).equals(first)).toBe(true);
    const restamped = Buffer.from(
      order.toString('latin1').replace('|20240318144217|', '|20240318150000|').replace(/\r/g, '\n'),
      'latin1',
    );
    expect((await h.mllp.send(restamped)).equals(first)).toBe(true);
  });

  it('a control ID written with a component separator (`20240318^0001`) is one ID: the next of the day is its own message, not a reuse', async () => {
    // A RIS that numbers its messages by day and sequence in MSH-10 (ST, but written with a
    // component separator). Our MSA-2 echoes it whole; before, the duplicate check read only its
    // first component, so `RIS20240318^0002` (the next order of the day) was refused AR 205 as a
    // reuse of `RIS20240318^0001`, and a resend of it would have got the first message's ACK.
    const order = withId('orm-o01-v231-ihe-swf-zds', 'RIS20240318^0001')
      .toString('latin1')
      .replace(/PLC-100234/g, 'PLC-200001')
      .replace(/ACC-20240318-0042/g, 'ACC-20240318-0201');
    const next = order
      .replace('RIS20240318^0001', 'RIS20240318^0002')
      .replace(/PLC-200001/g, 'PLC-200002')
      .replace(/ACC-20240318-0201/g, 'ACC-20240318-0202');
    const first = await h.mllp.send(Buffer.from(order, 'latin1'));
    expect(first.toString('latin1')).toMatch(/\rMSA\|AA\|RIS20240318\^0001\r/);
    const second = await h.mllp.send(Buffer.from(next, 'latin1'));
    expect(second.toString('latin1')).toMatch(/\rMSA\|AA\|RIS20240318\^0002\r/);
    // a resend of the second gets the second's answer, byte for byte
    expect((await h.mllp.send(Buffer.from(next, 'latin1'))).equals(second)).toBe(true);
    const orders = await h.db.query<{ placer_order_number: string }>(
      `SELECT placer_order_number FROM orders WHERE placer_order_number IN ('PLC-200001', 'PLC-200002') ORDER BY 1`,
    );
    expect(orders.rows.map((r) => r.placer_order_number)).toEqual(['PLC-200001', 'PLC-200002']);
    const stored = await h.db.query<{ message_control_id: string }>(
      `SELECT DISTINCT message_control_id FROM inbound_messages WHERE message_control_id LIKE 'RIS20240318%' ORDER BY 1`,
    );
    expect(stored.rows.map((r) => r.message_control_id)).toEqual([
      'RIS20240318^0001',
      'RIS20240318^0002',
    ]);
  });
});
