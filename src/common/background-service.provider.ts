import type {
  FactoryProvider,
  InjectionToken,
  OnApplicationBootstrap,
  OnApplicationShutdown,
} from '@nestjs/common';

/** How to stop what a background service started. */
export type StopService = () => void | Promise<void>;

/**
 * A Nest provider for a background service of the process (a listener, a worker): once the
 * application is up, `start` runs with the providers named in `inject`, in that order, and
 * answers how to stop what it started (nothing when the service is switched off); that runs
 * when the application shuts down.
 */
export function backgroundService<Deps extends unknown[]>(
  name: string,
  inject: InjectionToken[],
  start: (...deps: Deps) => StopService | undefined,
): FactoryProvider<OnApplicationBootstrap & OnApplicationShutdown> {
  return {
    provide: Symbol(`background service ${name}`),
    inject,
    useFactory: (...deps: Deps) => {
      let stop: StopService | undefined;
      return {
        onApplicationBootstrap(): void {
          stop = start(...deps);
        },
        async onApplicationShutdown(): Promise<void> {
          await stop?.();
        },
      };
    },
  };
}
