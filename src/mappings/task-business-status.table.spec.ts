import { ORDER_STATES } from '../domain/order-state';
import { UPSTREAM_STATUSES } from '../imaging-spec/imaging-spec';
import { BUSINESS_STATUS_SYSTEM, businessStatusOf } from './task-business-status.table';

const SYSTEMS: readonly string[] = Object.values(BUSINESS_STATUS_SYSTEM);

describe('Task.businessStatus table', () => {
  it('gives one coding of a system of ours and a text for every state, with or without an upstream status', () => {
    for (const state of ORDER_STATES) {
      for (const upstream of [null, 'NOT_A_SPEC_STATUS', ...UPSTREAM_STATUSES]) {
        const bs = businessStatusOf(state, upstream);
        expect(bs.coding).toHaveLength(1);
        expect(SYSTEMS).toContain(bs.coding![0]!.system);
        expect(bs.coding![0]!.code).toMatch(/^[A-Za-z_-]+$/);
        expect(bs.text).toBeTruthy();
      }
    }
  });

  it('shows an upstream status only for the end it led to; an end here is its local-end row', () => {
    expect(businessStatusOf('failed', 'PREPROCESSING_FAILED').coding![0]!.code).toBe(
      'PREPROCESSING_FAILED',
    );
    expect(businessStatusOf('failed', 'CANCELLED').coding![0]!.code).toBe('ENDED_LOCALLY_FAILED');
    expect(businessStatusOf('cancelled', 'DELIVERED').coding![0]!.code).toBe(
      'ENDED_LOCALLY_CANCELLED',
    );
    expect(businessStatusOf('cancelled', 'CANCELLED').coding![0]!.code).toBe('CANCELLED');
  });
});
