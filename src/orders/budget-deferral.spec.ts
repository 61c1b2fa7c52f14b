import type { Clock } from '../domain/clock';
import { BUDGET_DEFER_AFTER_MS, BudgetDeferral } from './budget-deferral';
import type { LifecycleDeps } from './use-cases/lifecycle-deps';

/** A clock that stands still: the run time of a deferred job is then exact. */
const NOW = Date.parse('2026-11-25T03:00:00Z');
const clock: Clock = { now: () => NOW };

function deferral(waitMs: number) {
  const enqueued: Array<{
    task: string;
    payload: unknown;
    options: { jobKey: string; runAt: Date };
  }> = [];
  const deps = {
    imaging: { client: { budgetWaitMs: async () => waitMs } },
    jobs: {
      enqueue: async (task: string, payload: unknown, options: { jobKey: string; runAt: Date }) => {
        enqueued.push({ task, payload, options });
      },
    },
    clock,
  } as unknown as Pick<LifecycleDeps, 'imaging' | 'jobs' | 'clock'>;
  return { budget: new BudgetDeferral(deps), enqueued };
}

describe('BudgetDeferral (on the Clock port)', () => {
  it('a call that would wait no longer than BUDGET_DEFER_AFTER_MS goes ahead', async () => {
    const { budget, enqueued } = deferral(BUDGET_DEFER_AFTER_MS);
    expect(await budget.deferForBudget('/new-order', 'order.place-upstream', {}, 'place:1')).toBe(
      false,
    );
    expect(enqueued).toEqual([]);
  });

  it('a longer wait puts the job back (same key) for when the budget frees, spread by at most a quarter', async () => {
    const { budget, enqueued } = deferral(8_000);
    const payload = { orderId: 'o-1' };
    expect(
      await budget.deferForBudget('/new-order', 'order.place-upstream', payload, 'place:o-1'),
    ).toBe(true);
    expect(enqueued).toHaveLength(1);
    const [job] = enqueued;
    expect(job!.task).toBe('order.place-upstream');
    expect(job!.payload).toBe(payload);
    expect(job!.options.jobKey).toBe('place:o-1');
    const delay = job!.options.runAt.getTime() - NOW;
    expect(delay).toBeGreaterThanOrEqual(8_000);
    expect(delay).toBeLessThan(8_000 + 2_000);
  });
});
