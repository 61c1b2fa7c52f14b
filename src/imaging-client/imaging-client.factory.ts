import type { DataSource } from 'typeorm';
import { ImagingClient } from './imaging-client';
import { DEFAULT_RATE_LIMITS, withDefaults, type RateLimitConfig } from './imaging-client.config';
import { PgRateLimiter } from './pg-rate-limiter';
import { PgUploadProgressStore, PgUploadSlots } from './pg-upload.stores';
import { combineObservers, systemClock, type CallObserver, type ClientLogger } from './ports';
import { PrometheusCallObserver, recordRateLimitWait } from './prometheus-call.observer';
import { StudyUploader } from './study-uploader';
import { UpstreamHealthStatus } from './upstream-health.status';

export interface ProductionImagingClient {
  client: ImagingClient;
  uploader: StudyUploader;
  /** For /health: `health.snapshot()`. */
  health: UpstreamHealthStatus;
  progress: PgUploadProgressStore;
}

/**
 * The client as production runs it: rate limit, upload progress and upload slots shared by
 * replicas through PostgreSQL, Prometheus metrics, health status, plus the caller's own
 * observers (the audit log).
 */
export function createProductionImagingClient(options: {
  config: Parameters<typeof withDefaults>[0];
  dataSource: DataSource;
  logger: ClientLogger;
  limits?: RateLimitConfig;
  /** Names the egress address whose budget replicas share (e.g. the NAT gateway). */
  rateLimitScope: string;
  observers?: CallObserver[];
}): ProductionImagingClient {
  const config = withDefaults(options.config);
  const health = new UpstreamHealthStatus();
  const client = new ImagingClient(config, {
    clock: systemClock,
    rateLimiter: new PgRateLimiter(options.dataSource, {
      limits: options.limits ?? DEFAULT_RATE_LIMITS,
      scope: options.rateLimitScope,
      onWait: recordRateLimitWait,
    }),
    observer: combineObservers(new PrometheusCallObserver(), health, ...(options.observers ?? [])),
    logger: options.logger,
  });
  const progress = new PgUploadProgressStore(options.dataSource);
  const uploader = new StudyUploader(client, {
    progress,
    slots: new PgUploadSlots(options.dataSource, { limit: config.upload.maxConcurrentUploads }),
    clock: systemClock,
    logger: options.logger,
  });
  return { client, uploader, health, progress };
}
