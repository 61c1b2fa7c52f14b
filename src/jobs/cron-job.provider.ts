import type { FactoryProvider, InjectionToken } from '@nestjs/common';
import type { JobQueue } from './job-queue';
import { JOB_QUEUE } from './jobs.tokens';

/**
 * A Nest provider that registers `task` on the shared job queue with the cron item that fires
 * it (`pattern`, crontab syntax in UTC: once per cluster, not once per replica). The task runs
 * `run` with the providers named in `inject`, in that order.
 */
export function cronJob<Deps extends unknown[]>(
  task: string,
  pattern: string,
  inject: InjectionToken[],
  run: (...deps: Deps) => Promise<void>,
): FactoryProvider<string> {
  return {
    provide: Symbol(`cron job ${task}`),
    inject: [JOB_QUEUE, ...inject],
    useFactory: (jobs: JobQueue, ...deps: Deps) => {
      jobs.registerTask(task, () => run(...deps));
      jobs.registerCron(pattern, task);
      return task;
    },
  };
}
