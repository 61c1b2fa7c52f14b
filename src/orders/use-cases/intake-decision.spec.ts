import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parseHl7 } from '../../hl7/hl7-message';
import { DEFAULT_HL7_ORDER_MAPPING_CONFIG } from '../../mappings/hl7-order.config';
import { mapHl7Message } from '../../mappings/hl7-order.mapping';
import type { IntakeOrderRow } from '../../persistence/order.repository';
import type { IntakeOrder } from '../intake.model';
import { decide } from './intake-decision';

const FIXTURES = path.join(__dirname, '../../../test/fixtures/hl7');
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** The intake's orders of a real fixture message, as the MLLP front door hands them over. */
function ordersOf(fixture: string): IntakeOrder[] {
  const mapped = mapHl7Message(
    parseHl7(readFileSync(path.join(FIXTURES, fixture))),
    DEFAULT_HL7_ORDER_MAPPING_CONFIG,
  );
  if (mapped.outcome === 'error') throw new Error(`${fixture}: ${JSON.stringify(mapped.errors)}`);
  return mapped.orders.map((o) => ({
    request: o.request,
    lineage: o.lineage,
    sourceRef: `ORC/OBR group ${o.groupIndex}`,
  }));
}

function one(fixture: string): IntakeOrder {
  const [order, ...rest] = ordersOf(fixture);
  expect(rest).toHaveLength(0);
  return order!;
}

/** An order row as intake_lock_and_find / the filler lookup return it. */
function stored(order: IntakeOrder, state: string, id = '0193a6d4-7c1e-7a00-8000-000000000001') {
  return {
    id,
    state,
    upstream_order_id: state === 'received' ? null : 'UP-1',
    place_attempted_at: state === 'received' ? null : new Date(),
    cancel_requested_at: null as Date | null,
    request: order.request,
  } satisfies IntakeOrderRow;
}

const NEW_ORDER = 'orm-o01-v231-ihe-swf-zds.hl7'; // ORC-1 NW, placer PLC-100234
const CHANGE = 'orm-o01-v251-change-xo.hl7'; // ORC-1 XO, same placer
const CANCEL = 'orm-o01-v251-cancel-ca.hl7'; // ORC-1 CA, same placer
const STATUS = 'orm-o01-v24-status-sc-mixed.hl7'; // ORC-1 SC
const TWO_NEW_ORDERS = 'omi-o23-v28-multi-order.hl7'; // two NW groups, two placer numbers

/** The fixture's one order (asserting its action) and a stored order in `state` it refers to. */
function againstStored(fixture: string, action: string, state: string) {
  const order = one(fixture);
  expect(order.request.action).toBe(action);
  return { order, existing: stored(one(NEW_ORDER), state) };
}

describe('decide(): what one order group of a message does (pure)', () => {
  it('a new order (NW) nobody knows is created, with a fresh UUIDv7', () => {
    const order = one(NEW_ORDER);
    expect(order.request.action).toBe('create');
    const step = decide(order, undefined, undefined);
    expect(step.kind).toBe('create');
    if (step.kind !== 'create') return;
    expect(step.orderId).toMatch(UUID);
    expect(step.order).toBe(order);
    expect(step.result).toEqual({
      kind: 'created',
      orderId: step.orderId,
      sourceRef: 'ORC/OBR group 1',
    });
    expect(decide(order, undefined, undefined)).not.toMatchObject({ orderId: step.orderId });
  });

  it('each group of a multi-order message is its own create', () => {
    const orders = ordersOf(TWO_NEW_ORDERS);
    expect(orders).toHaveLength(2);
    const steps = orders.map((o) => decide(o, undefined, undefined));
    expect(steps.map((s) => [s.kind, s.result.sourceRef])).toEqual([
      ['create', 'ORC/OBR group 1'],
      ['create', 'ORC/OBR group 2'],
    ]);
    expect(new Set(steps.map((s) => 'orderId' in s && s.orderId)).size).toBe(2);
  });

  it('a resend of a known order (same placer number, new control id) is not created again', () => {
    const order = one(NEW_ORDER);
    const step = decide(order, stored(order, 'placed'), undefined);
    expect(step).toMatchObject({
      kind: 'duplicate-create',
      orderId: stored(order, 'placed').id,
      state: 'placed',
      result: { kind: 'already-known', orderId: stored(order, 'placed').id },
    });
  });

  it('the same placer number twice in one message: the second is the first (state received)', () => {
    const order = one(NEW_ORDER);
    const first = '0193a6d4-7c1e-7a00-8000-0000000000ff';
    expect(decide(order, undefined, first)).toMatchObject({
      kind: 'duplicate-create',
      orderId: first,
      state: 'received',
      result: { kind: 'already-known', orderId: first, sourceRef: 'ORC/OBR group 1' },
    });
  });

  it('a new order for a placer number whose order was cancelled is a new order', () => {
    const order = one(NEW_ORDER);
    const step = decide(order, stored(order, 'cancelled'), undefined);
    expect(step.kind).toBe('create');
    expect(step).not.toMatchObject({ orderId: stored(order, 'cancelled').id });
  });

  it('an order whose cancel was requested (not ended yet): a NW is a new order, an XO is UX, a CA is CR again', () => {
    const order = one(NEW_ORDER);
    const ending = { ...stored(order, 'placed'), cancel_requested_at: new Date() };
    const step = decide(order, ending, undefined);
    expect(step.kind).toBe('create');
    expect(step).not.toMatchObject({ orderId: ending.id });
    const { order: change } = againstStored(CHANGE, 'update', 'placed');
    expect(decide(change, ending, undefined)).toMatchObject({
      kind: 'change-too-late',
      cancelRequested: true,
      result: { kind: 'change-too-late', orderId: ending.id, state: 'placed' },
    });
    const { order: cancel } = againstStored(CANCEL, 'cancel', 'placed');
    expect(decide(cancel, ending, undefined)).toMatchObject({ kind: 'cancel' });
  });

  it('an order an earlier group of the same message cancels is decided as one whose cancel was requested', () => {
    const order = one(NEW_ORDER);
    const open = stored(order, 'placed');
    expect(decide(order, open, undefined, true)).toMatchObject({ kind: 'create' });
    expect(decide(order, open, undefined, true)).not.toMatchObject({ orderId: open.id });
    const { order: change } = againstStored(CHANGE, 'update', 'placed');
    expect(decide(change, open, undefined, true)).toMatchObject({
      kind: 'change-too-late',
      cancelRequested: true,
    });
    // without it, the same order is the known one (a resend)
    expect(decide(order, open, undefined)).toMatchObject({ kind: 'duplicate-create' });
  });

  it('a change (XO) of a known order updates it; of an unknown one is refused as unknown', () => {
    const { order: change, existing } = againstStored(CHANGE, 'update', 'placed');
    expect(decide(change, existing, undefined)).toMatchObject({
      kind: 'update',
      orderId: existing.id,
      existing,
      result: { kind: 'updated', orderId: existing.id },
    });
    expect(decide(change, undefined, undefined)).toMatchObject({
      kind: 'unknown',
      result: { kind: 'unknown-order', action: 'change', sourceRef: 'ORC/OBR group 1' },
    });
  });

  it.each(['delivered', 'failed', 'cancelled'] as const)(
    'a change (XO) of an order that is already %s is not applied (UX), with the state it had',
    (state) => {
      const { order: change, existing } = againstStored(CHANGE, 'update', state);
      expect(decide(change, existing, undefined)).toMatchObject({
        kind: 'change-too-late',
        orderId: existing.id,
        state,
        result: { kind: 'change-too-late', orderId: existing.id, state },
      });
    },
  );

  it('a cancel (CA) of an order under way is accepted, with the state it had', () => {
    const { order: cancel, existing } = againstStored(CANCEL, 'cancel', 'processing');
    expect(decide(cancel, existing, undefined)).toMatchObject({
      kind: 'cancel',
      orderId: existing.id,
      state: 'processing',
      result: { kind: 'cancel-accepted', orderId: existing.id },
    });
  });

  it('a cancel of an ended order is too late; of an unknown order, unknown', () => {
    const cancel = one(CANCEL);
    const delivered = stored(one(NEW_ORDER), 'delivered');
    expect(decide(cancel, delivered, undefined)).toMatchObject({
      kind: 'cancel-too-late',
      orderId: delivered.id,
      state: 'delivered',
      result: { kind: 'cancel-too-late', orderId: delivered.id, state: 'delivered' },
    });
    expect(decide(cancel, undefined, undefined)).toMatchObject({
      kind: 'unknown',
      result: { kind: 'unknown-order', action: 'cancel' },
    });
  });

  it('a state written by a newer version counts as received: a cancel is still accepted', () => {
    const cancel = one(CANCEL);
    const existing = stored(one(NEW_ORDER), 'some-future-state');
    expect(decide(cancel, existing, undefined)).toMatchObject({
      kind: 'cancel',
      state: 'received',
    });
  });

  it('a status message (SC) is recorded, on its order when known', () => {
    const status = one(STATUS);
    expect(status.request.action).toBe('status');
    const existing = stored(status, 'processing');
    expect(decide(status, existing, undefined)).toEqual({
      kind: 'status',
      orderId: existing.id,
      order: status,
      result: { kind: 'status-recorded', orderId: existing.id, sourceRef: 'ORC/OBR group 1' },
    });
    expect(decide(status, undefined, undefined)).toMatchObject({
      kind: 'status',
      orderId: null,
      result: { kind: 'status-recorded', orderId: null },
    });
  });
});
