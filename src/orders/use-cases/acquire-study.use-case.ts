import { LIFECYCLE_JOBS } from '../lifecycle-jobs';
import { loadOrder, stateOf, transition } from '../order-transitions';
import type { EndLocallyUseCase } from './end-locally.use-case';
import type { LifecycleDeps } from './lifecycle-deps';
import { studyRequestOf } from '../study-request';
import { withLockedOrder } from './locked-order';

/** `order.acquire-study`: finds the order's study and packages it for upload. */
export class AcquireStudyUseCase {
  constructor(
    private readonly deps: LifecycleDeps,
    private readonly ending: EndLocallyUseCase,
  ) {}

  async acquireStudy(orderId: string): Promise<void> {
    const { dataSource, jobs } = this.deps;
    const order = await loadOrder(dataSource.manager, orderId);
    if (!order || order.cancel_requested_at) return;
    const state = stateOf(order);
    if (state === 'study-ready') {
      await jobs.enqueue(LIFECYCLE_JOBS.upload, { orderId }, { jobKey: `upload:${orderId}` });
      return;
    }
    if (state !== 'placed') return;
    if (order.study_deadline_at && order.study_deadline_at.getTime() <= this.deps.clock.now()) {
      await this.ending.studyDeadlinePassed(orderId);
      return;
    }
    const result = await this.deps.acquirer.acquire(studyRequestOf(order));
    switch (result.status) {
      case 'waiting': {
        const deadline = order.study_deadline_at?.getTime() ?? Infinity;
        const at = Math.min(this.deps.clock.now() + result.retryAfterMs, deadline + 1000);
        await jobs.enqueue(
          LIFECYCLE_JOBS.acquire,
          { orderId },
          { jobKey: `acquire:${orderId}`, runAt: new Date(at) },
        );
        return;
      }
      case 'failed':
        await this.ending.endLocally(
          orderId,
          'failed',
          `the study cannot be used: ${result.reason}`,
          result.alert ?? 'study-unusable',
        );
        return;
      case 'ready':
        await withLockedOrder(dataSource, orderId, async (manager, current) => {
          const moved = await transition(
            manager,
            current,
            'study-ready',
            {
              summary: `study packaged (${result.study.instanceCount} instances, ${result.study.seriesCount} series, ${result.study.sizeBytes} bytes, from ${result.study.source})`,
              detail: {
                studyInstanceUid: result.study.studyInstanceUid,
                sizeBytes: result.study.sizeBytes,
                instances: result.study.instanceCount,
                source: result.study.source,
              },
            },
            {
              package_path: result.study.packagePath,
              study_instance_uid: current.study_instance_uid ?? result.study.studyInstanceUid,
            },
          );
          if (moved.applied) {
            await jobs.enqueue(
              LIFECYCLE_JOBS.upload,
              { orderId },
              { manager, jobKey: `upload:${orderId}` },
            );
          }
        });
        jobs.kick();
        return;
      default:
        return result satisfies never;
    }
  }
}
