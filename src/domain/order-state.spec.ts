import { STATUS_TABLE } from '../mappings/status-mapping.table';
import {
  canTransition,
  FOLLOWED_STATES,
  isTerminal,
  ORDER_STATES,
  ORDER_TRANSITIONS,
  phaseOf,
} from './order-state';

describe('order state machine', () => {
  it('ends have no way out, and every other state can still fail or be cancelled', () => {
    for (const state of ORDER_STATES) {
      if (isTerminal(state)) {
        expect(ORDER_TRANSITIONS[state]).toEqual([]);
        expect(phaseOf(state)).toBe('ended');
      } else {
        expect(ORDER_TRANSITIONS[state]).toEqual(expect.arrayContaining(['failed', 'cancelled']));
      }
    }
  });

  it('lists only known states as targets', () => {
    for (const targets of Object.values(ORDER_TRANSITIONS)) {
      for (const t of targets) expect(ORDER_STATES).toContain(t);
    }
  });

  it('reaches every state from received', () => {
    const seen = new Set(['received']);
    const queue = ['received'] as Array<(typeof ORDER_STATES)[number]>;
    while (queue.length > 0) {
      for (const next of ORDER_TRANSITIONS[queue.shift()!]) {
        if (!seen.has(next)) {
          seen.add(next);
          queue.push(next);
        }
      }
    }
    expect([...seen].sort()).toEqual([...ORDER_STATES].sort());
  });

  it('can make every move the status mapping table asks for from a followed state', () => {
    // The poller applies rows to orders in processing or qc-hold.
    for (const from of FOLLOWED_STATES) {
      for (const [key, row] of Object.entries(STATUS_TABLE)) {
        const ok = row.orderState === from || canTransition(from, row.orderState);
        expect({ from, key, ok }).toEqual({ from, key, ok: true });
      }
    }
  });

  it('refuses moves backwards out of an end', () => {
    expect(canTransition('delivered', 'processing')).toBe(false);
    expect(canTransition('cancelled', 'failed')).toBe(false);
    expect(canTransition('uploading', 'study-ready')).toBe(true);
  });
});
