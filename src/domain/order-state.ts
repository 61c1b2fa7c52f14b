/**
 * Our order's states and the transitions between them: the one table every use case asks
 * before it changes an order. A transition the table does not list is refused and audited.
 */
export const ORDER_STATES = [
  'received', // stored and acknowledged; the upstream order is not created yet
  'placed', // the upstream order exists (with its metadata); waiting for the study
  'study-ready', // the study is on disk, validated, packaged
  'uploading', // upload in progress (single PUT or multipart)
  'processing', // uploaded; the upstream is working on it
  'qc-hold', // QC_FAILED that can still be bypassed: awaiting a human decision
  'delivered', // DELIVERED and results fetched
  'failed', // no result is coming (FAILED, PREPROCESSING_FAILED, final QC rejection, EXPIRED, deadline)
  'cancelled', // cancelled by the orderer (or upstream CANCELLED)
] as const;

export type OrderState = (typeof ORDER_STATES)[number];

export const TERMINAL_ORDER_STATES: readonly OrderState[] = ['delivered', 'failed', 'cancelled'];

export const ORDER_TRANSITIONS: Readonly<Record<OrderState, readonly OrderState[]>> = {
  received: ['placed', 'cancelled', 'failed'],
  placed: ['study-ready', 'processing', 'cancelled', 'failed'],
  // back to 'placed' when the package vanished (another replica's disk) and must be re-acquired
  'study-ready': ['uploading', 'placed', 'cancelled', 'failed'],
  uploading: ['processing', 'study-ready', 'cancelled', 'failed'],
  processing: ['qc-hold', 'delivered', 'failed', 'cancelled'],
  'qc-hold': ['processing', 'failed', 'cancelled', 'delivered'],
  delivered: [],
  failed: [],
  cancelled: [],
};

export function isTerminal(state: OrderState): boolean {
  return TERMINAL_ORDER_STATES.includes(state);
}

export function canTransition(from: OrderState, to: OrderState): boolean {
  return ORDER_TRANSITIONS[from].includes(to);
}

export function isOrderState(value: unknown): value is OrderState {
  return typeof value === 'string' && (ORDER_STATES as readonly string[]).includes(value);
}

/** Which use case owns an order in this state; a new state breaks the build until it is placed. */
export type StatePhase = 'placing' | 'acquiring' | 'uploading' | 'following' | 'ended';

export function phaseOf(state: OrderState): StatePhase {
  switch (state) {
    case 'received':
      return 'placing';
    case 'placed':
    case 'study-ready':
      return 'acquiring';
    case 'uploading':
      return 'uploading';
    case 'processing':
    case 'qc-hold':
      return 'following';
    case 'delivered':
    case 'failed':
    case 'cancelled':
      return 'ended';
    default:
      return state satisfies never;
  }
}

/** The states the poller follows upstream (an upload completed, no end reached yet). */
export const FOLLOWED_STATES: readonly OrderState[] = ORDER_STATES.filter(
  (s) => phaseOf(s) === 'following',
);
