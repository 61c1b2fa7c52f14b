import { LIFECYCLE_JOBS } from '../lifecycle-jobs';
import type { EndLocallyUseCase } from './end-locally.use-case';
import type { LifecycleDeps } from './lifecycle-deps';

/** The minute tick's deadlines and leases. */
export class SweepUseCase {
  constructor(
    private readonly deps: LifecycleDeps,
    private readonly ending: EndLocallyUseCase,
  ) {}

  /** Study deadline, stuck upstream orders, lapsed upload leases. Returns what it did. */
  async sweep(): Promise<{ studyDeadlines: number; stuck: number; leasesResumed: number }> {
    const { jobs, settings } = this.deps;
    const late = await this.deps.orders.pastStudyDeadline();
    for (const o of late) await this.ending.studyDeadlinePassed(o.id);
    const stuck = await this.deps.orders.stuckUpstream(settings.upstreamStuckMs);
    for (const o of stuck) {
      await this.ending.endLocally(
        o.id,
        'failed',
        `the upstream order stayed ${o.upstream_status} longer than ${Math.round(settings.upstreamStuckMs / 3_600_000)} h`,
        'upstream-stuck',
      );
    }
    const lapsed = await this.deps.uploadLease.lapsed();
    for (const o of lapsed) {
      // A new job even if a dead worker's job still holds the key (graphile-worker then
      // creates a new job and clears the old one's key).
      await jobs.enqueue(LIFECYCLE_JOBS.upload, { orderId: o.id }, { jobKey: `upload:${o.id}` });
    }
    return { studyDeadlines: late.length, stuck: stuck.length, leasesResumed: lapsed.length };
  }
}
