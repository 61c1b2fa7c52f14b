import type { LifecycleDeps } from './use-cases/lifecycle-deps';
import { budgetDeferrals } from './order-metrics';

/**
 * A job whose first upstream call would wait longer than this for our rate budget is put
 * back for when the budget frees, instead of holding one of the few job workers while it
 * waits. Otherwise, once one endpoint is saturated (a burst of new orders: 100 creates at a
 * budget of 50/min), every worker sits waiting for it, and the next steps of the orders
 * already under way (upload, documents) queue behind: the steps run one after the other
 * instead of together, and a burst takes the sum of their times (docs/fire.md).
 */
export const BUDGET_DEFER_AFTER_MS = 2_000;

/** Puts a job back for later instead of waiting for our upstream rate budget. */
export class BudgetDeferral {
  constructor(private readonly deps: Pick<LifecycleDeps, 'imaging' | 'jobs' | 'clock'>) {}

  private get client() {
    return this.deps.imaging.client;
  }

  /**
   * Puts the job back (same job key) for when our budget for `endpoint` frees, if a call to it
   * would now wait longer than BUDGET_DEFER_AFTER_MS. Jobs put back together are spread over
   * a few seconds more, so they do not all ask at the same instant; not more, or the budget
   * freed meanwhile would go unused.
   */
  async deferForBudget(
    endpoint: string,
    task: string,
    payload: Record<string, unknown>,
    jobKey: string,
  ): Promise<boolean> {
    const waitMs = await this.client.budgetWaitMs(endpoint);
    if (waitMs <= BUDGET_DEFER_AFTER_MS) return false;
    const spread = Math.floor(Math.random() * Math.min(5_000, waitMs / 4));
    await this.deps.jobs.enqueue(task, payload, {
      jobKey,
      runAt: new Date(this.deps.clock.now() + waitMs + spread),
    });
    budgetDeferrals.inc({ job: task });
    return true;
  }
}
