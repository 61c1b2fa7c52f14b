import { Inject, Injectable, Module, type OnApplicationShutdown } from '@nestjs/common';
import type { Logger } from 'pino';
import type { DataSource } from 'typeorm';
import { APP_CONFIG, DATA_SOURCE, LOGGER } from '../common/tokens';
import type { AppConfig } from '../config/app-config';
import { AuditCallObserver } from './audit-call.observer';
import {
  createProductionImagingClient,
  type ProductionImagingClient,
} from './imaging-client.factory';

/** The wired client bundle: `{ client, uploader, health, progress }`. */
export const IMAGING = Symbol('IMAGING');
/** `{base_url}` of the upstream: IMAGING_BASE_URL or the in-process sandbox (provided by AppModule). */
export const UPSTREAM_BASE_URL = Symbol('UPSTREAM_BASE_URL');

/** The in-process sandbox's default client (docs/sandbox.md). */
const SANDBOX_CREDENTIALS = {
  clientId: 'sandbox-client',
  clientSecret: 'sandbox-secret',
  organizationId: 'sandbox-org',
};

export function imagingClientSettings(config: AppConfig, baseUrl: string) {
  const useSandboxDefaults = config.useEmbeddedSandbox;
  return {
    baseUrl,
    clientId: config.IMAGING_CLIENT_ID ?? (useSandboxDefaults ? SANDBOX_CREDENTIALS.clientId : ''),
    clientSecret:
      config.IMAGING_CLIENT_SECRET ?? (useSandboxDefaults ? SANDBOX_CREDENTIALS.clientSecret : ''),
    organizationId:
      config.IMAGING_ORGANIZATION_ID ??
      (useSandboxDefaults ? SANDBOX_CREDENTIALS.organizationId : ''),
    retry: {
      maxAttempts: config.IMAGING_RETRY_MAX_ATTEMPTS,
      deadlineMs: config.IMAGING_RETRY_DEADLINE_SECONDS * 1000,
    },
    upload: {
      partConcurrency: config.IMAGING_UPLOAD_PART_CONCURRENCY,
      maxConcurrentUploads: config.IMAGING_MAX_CONCURRENT_UPLOADS,
    },
    uploadHosts: config.IMAGING_UPLOAD_HOSTS ?? [],
    basicAuthEncoding: config.IMAGING_BASIC_AUTH_ENCODING,
  };
}

@Injectable()
class ImagingClientCloser implements OnApplicationShutdown {
  constructor(
    @Inject(IMAGING) private readonly imaging: ProductionImagingClient,
    @Inject(AuditCallObserver) private readonly audit: AuditCallObserver,
  ) {}

  async onApplicationShutdown(): Promise<void> {
    await this.audit.flush();
    await this.imaging.client.close();
  }
}

/**
 * The upstream client as the app uses it: PostgreSQL rate limit, upload progress and slots
 * shared by replicas, Prometheus metrics, /health state, and an `upstream.call` audit event
 * per call.
 */
@Module({
  providers: [
    {
      provide: AuditCallObserver,
      inject: [DATA_SOURCE, LOGGER],
      useFactory: (dataSource: DataSource, logger: Logger) =>
        new AuditCallObserver(dataSource, logger),
    },
    {
      provide: IMAGING,
      inject: [APP_CONFIG, DATA_SOURCE, LOGGER, UPSTREAM_BASE_URL, AuditCallObserver],
      useFactory: (
        config: AppConfig,
        dataSource: DataSource,
        logger: Logger,
        baseUrl: string,
        audit: AuditCallObserver,
      ) => {
        const settings = imagingClientSettings(config, baseUrl);
        if (!settings.clientId || !settings.clientSecret || !settings.organizationId) {
          logger.warn(
            { component: 'imaging-client' },
            'IMAGING_CLIENT_ID, IMAGING_CLIENT_SECRET or IMAGING_ORGANIZATION_ID unset: upstream calls will be refused',
          );
        }
        return createProductionImagingClient({
          config: settings,
          dataSource,
          logger: logger.child({ component: 'imaging-client' }),
          limits: {
            perEndpointPerMinute: config.IMAGING_RATE_LIMIT_PER_ENDPOINT,
            totalPerMinute: config.IMAGING_RATE_LIMIT_TOTAL,
          },
          rateLimitScope: new URL(baseUrl).host,
          observers: [audit],
        });
      },
    },
    ImagingClientCloser,
  ],
  exports: [IMAGING],
})
export class ImagingClientModule {}
