import type { OrderRequest } from '../../domain/order-request';
import { decideReplace, REPLACE_WORDING, type ReplacedRow } from './replace-decision';

const patient = { identifiers: [{ system: 'urn:mrn', value: 'P1' }] };
const request = { source: 'fhir', action: 'create', patient, products: ['x'] } as OrderRequest;
const row = (over: Partial<ReplacedRow> = {}): ReplacedRow => ({
  id: 'old',
  state: 'placed',
  upstream_order_id: 'u1',
  place_attempted_at: null,
  cancel_requested_at: null,
  request,
  sender: 's1',
  ...over,
});
const target = {
  element: 'ServiceRequest.replaces[0]',
  named: 'ServiceRequest/old',
  orderId: 'old',
};
const decide = (r: ReplacedRow | undefined, t = target, cancelledHere = false) =>
  decideReplace('new', 'ServiceRequest', request, 's1', t, r, cancelledHere).outcome;

describe('replace decision (FHIR ServiceRequest.replaces)', () => {
  it('cancels only an open order of the same sender and patient', () => {
    expect(decide(row())).toBe('cancel');
    expect(decide(row({ state: 'received', upstream_order_id: null }))).toBe('cancel');
  });

  it('says why it does not cancel in every other case', () => {
    expect(decide(undefined)).toBe('not-held');
    expect(
      decide(undefined, { ...target, orderId: undefined, unmatched: 'outside-base' } as never),
    ).toBe('outside-base');
    expect(decide(row({ id: 'new' }))).toBe('self');
    expect(decide(row({ sender: 's2' }))).toBe('other-sender');
    expect(decide(row({ sender: null }))).toBe('other-sender');
    expect(
      decide(
        row({
          request: { ...request, patient: { identifiers: [{ system: 'urn:mrn', value: 'P2' }] } },
        }),
      ),
    ).toBe('other-patient');
    for (const state of ['delivered', 'failed', 'cancelled'])
      expect(decide(row({ state }))).toBe('ended');
    expect(decide(row({ cancel_requested_at: new Date() }))).toBe('cancel-requested');
    expect(decide(row(), target, true)).toBe('cancel-requested');
  });

  it('words every outcome for the new order, and for the replaced one where one of ours is named', () => {
    for (const [outcome, w] of Object.entries(REPLACE_WORDING)) {
      expect(w.replaces.length).toBeGreaterThan(0);
      if (
        ['cancel', 'ended', 'other-sender', 'other-patient', 'cancel-requested'].includes(outcome)
      )
        expect(w.replaced).toBeDefined();
    }
  });
});
