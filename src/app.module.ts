import { type DynamicModule, Module } from '@nestjs/common';
import { APP_FILTER, APP_GUARD } from '@nestjs/core';
import type { Logger } from 'pino';
import type { DataSource } from 'typeorm';
import { API_CREDENTIALS, BearerAuthGuard } from './auth/bearer-auth.guard';
import type { ApiCredentials } from './auth/api-credentials';
import { ProblemJsonFilter } from './common/problem-json.filter';
import { APP_CONFIG, DATA_SOURCE, LOGGER } from './common/tokens';
import type { AppConfig } from './config/app-config';
import { HealthController } from './health/health.controller';
import { InboundHl7Module } from './inbound-hl7/inbound-hl7.module';
import { InboundFhirModule } from './inbound-fhir/inbound-fhir.module';
import { AuditModule } from './audit/audit.module';
import { StudiesModule } from './studies/studies.module';
import { OrdersModule } from './orders/orders.module';
import { OutboundModule } from './outbound/outbound.module';
import {
  IMAGING,
  ImagingClientModule,
  UPSTREAM_BASE_URL,
} from './imaging-client/imaging-client.module';
import type { ProductionImagingClient } from './imaging-client/imaging-client.factory';
import { ClientUpstreamProbe } from './imaging-client/upstream-health.probe';
import { UPSTREAM_PROBE } from './health/health.tokens';
import type { UpstreamProbe } from './domain/upstream-probe.port';
import { JOB_QUEUE } from './jobs/jobs.tokens';
import { DocsController } from './observability/docs.controller';
import { OpenApiController, OpenApiDocument } from './observability/openapi.controller';
import type { JobQueue } from './jobs/job-queue';

/** What is built before Nest starts (database, logger, upstream) and handed to every module. */
export interface AdapterRuntime {
  config: AppConfig;
  logger: Logger;
  dataSource: DataSource;
  databaseUrl: string;
  credentials: ApiCredentials;
  upstreamBaseUrl: string;
  upstreamProbe: UpstreamProbe;
  jobQueue: JobQueue;
}

/** Composition only. */
@Module({})
export class AppModule {
  static forRoot(runtime: AdapterRuntime): DynamicModule {
    return {
      module: AppModule,
      global: true,
      imports: [
        InboundHl7Module,
        InboundFhirModule,
        AuditModule,
        StudiesModule,
        ImagingClientModule,
        OrdersModule,
        OutboundModule,
      ],
      controllers: [HealthController, OpenApiController, DocsController],
      providers: [
        OpenApiDocument,
        { provide: APP_CONFIG, useValue: runtime.config },
        { provide: LOGGER, useValue: runtime.logger },
        { provide: DATA_SOURCE, useValue: runtime.dataSource },
        { provide: API_CREDENTIALS, useValue: runtime.credentials },
        { provide: UPSTREAM_BASE_URL, useValue: runtime.upstreamBaseUrl },
        {
          // /health from what the client saw on real calls (retired, deprecation, failures);
          // the reachability probe answers until the first call.
          provide: UPSTREAM_PROBE,
          inject: [IMAGING],
          useFactory: (imaging: ProductionImagingClient) =>
            new ClientUpstreamProbe(imaging.health, runtime.upstreamBaseUrl, runtime.upstreamProbe),
        },
        { provide: JOB_QUEUE, useValue: runtime.jobQueue },
        { provide: APP_GUARD, useClass: BearerAuthGuard },
        { provide: APP_FILTER, useClass: ProblemJsonFilter },
      ],
      exports: [APP_CONFIG, LOGGER, DATA_SOURCE, UPSTREAM_PROBE, JOB_QUEUE, UPSTREAM_BASE_URL],
    };
  }
}
