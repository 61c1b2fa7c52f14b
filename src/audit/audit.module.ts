import {
  Inject,
  type MiddlewareConsumer,
  Module,
  type NestModule,
  RequestMethod,
} from '@nestjs/common';
import express from 'express';
import type { Logger } from 'pino';
import type { DataSource } from 'typeorm';
import { AuditSessionStore } from '../auth/audit-session.store';
import { APP_CONFIG, DATA_SOURCE, LOGGER } from '../common/tokens';
import type { AppConfig } from '../config/app-config';
import { cronJob } from '../jobs/cron-job.provider';
import { DESTINATION_SETTINGS, deliverableDestinations } from '../outbound/outbound.settings';
import { AuditApiController } from './audit-api.controller';
import { MappingDryRunController } from './mapping-dry-run.controller';
import { AuditMessagesPageController } from './audit-messages-page.controller';
import { AuditOrdersPageController } from './audit-orders-page.controller';
import { AuditPageController } from './audit-page.controller';
import { AuditToolsPageController } from './audit-tools-page.controller';
import { AuditPageFilter } from './audit-page.filter';
import { AuditQueryService } from './audit-query.service';
import {
  AUDIT_PRUNE_CRON,
  AUDIT_PRUNE_TASK,
  AuditRetentionService,
} from './audit-retention.service';
import {
  AUDIT_QUERY,
  AUDIT_RETENTION,
  AUDIT_SESSIONS,
  DEAD_LETTER_BULK_REPLAY,
  MESSAGE_REPROCESSOR,
} from './audit.tokens';
import { DeadLetterBulkReplay } from './dead-letter-bulk-replay';
import { MessageReprocessor } from './audit-api.reprocess';
import { InboundHl7Module } from '../inbound-hl7/inbound-hl7.module';
import { MllpListenerService } from '../inbound-hl7/mllp-listener.service';
import { InboundFhirModule } from '../inbound-fhir/inbound-fhir.module';
import { CreateServiceRequestOperation } from '../inbound-fhir/service-request-create.operation';
import { FhirBundleOperation } from '../inbound-fhir/fhir-bundle.operation';
import { boundedBodyParser } from '../common/bounded-body-parser';

/** The audit web page (/audit), one controller per page group. */
const PAGE_CONTROLLERS = [
  AuditPageController,
  AuditOrdersPageController,
  AuditMessagesPageController,
  AuditToolsPageController,
];

/** The audit log's reading side: REST API (/api/audit), web page (/audit), retention. */
/** The page's other forms (sign-in, reasons, CSRF tokens). */
const FORM_MAX_BYTES = 16 * 1024;

@Module({
  imports: [InboundHl7Module, InboundFhirModule],
  controllers: [AuditApiController, ...PAGE_CONTROLLERS, MappingDryRunController],
  providers: [
    {
      provide: AUDIT_QUERY,
      useFactory: (ds: DataSource, config: AppConfig) =>
        new AuditQueryService(ds, {
          destinations: deliverableDestinations(config),
          settings: DESTINATION_SETTINGS,
        }),
      inject: [DATA_SOURCE, APP_CONFIG],
    },
    {
      provide: DEAD_LETTER_BULK_REPLAY,
      useFactory: (query: AuditQueryService) => new DeadLetterBulkReplay(query),
      inject: [AUDIT_QUERY],
    },
    {
      provide: AUDIT_RETENTION,
      useFactory: (ds: DataSource, config: AppConfig) =>
        new AuditRetentionService(ds, config.AUDIT_RETENTION_DAYS),
      inject: [DATA_SOURCE, APP_CONFIG],
    },
    {
      provide: AUDIT_SESSIONS,
      useFactory: (ds: DataSource) => new AuditSessionStore(ds),
      inject: [DATA_SOURCE],
    },
    {
      provide: MESSAGE_REPROCESSOR,
      useFactory: (
        query: AuditQueryService,
        mllp: MllpListenerService,
        create: CreateServiceRequestOperation,
        bundle: FhirBundleOperation,
      ) => new MessageReprocessor(query, mllp, create, bundle),
      inject: [
        AUDIT_QUERY,
        MllpListenerService,
        CreateServiceRequestOperation,
        FhirBundleOperation,
      ],
    },
    // The nightly retention job.
    cronJob(
      AUDIT_PRUNE_TASK,
      AUDIT_PRUNE_CRON,
      [AUDIT_RETENTION, LOGGER],
      async (retention: AuditRetentionService, logger: Logger) => {
        const result = await retention.prune();
        logger.info({ ...result }, 'audit retention: old audit events pruned');
      },
    ),
    AuditPageFilter,
  ],
})
export class AuditModule implements NestModule {
  constructor(@Inject(APP_CONFIG) private readonly config: AppConfig) {}

  configure(consumer: MiddlewareConsumer): void {
    // The page's forms post application/x-www-form-urlencoded (no script on the page).
    // The dry-run form carries a pasted message: up to the front doors' own bound.
    // Bounded past their limits (boundedBodyParser): they run before authentication, and
    // alone read and dropped whatever followed the limit (an endless chunked body for ever).
    const dryRunLimit =
      Math.max(this.config.MLLP_MAX_MESSAGE_BYTES, this.config.FHIR_MAX_BODY_BYTES) * 3;
    consumer
      .apply(
        boundedBodyParser(express.urlencoded({ extended: false, limit: dryRunLimit }), dryRunLimit),
      )
      .forRoutes({ path: 'audit/dry-run', method: RequestMethod.POST });
    consumer
      .apply(
        boundedBodyParser(
          express.urlencoded({ extended: false, limit: FORM_MAX_BYTES }),
          FORM_MAX_BYTES,
        ),
      )
      .forRoutes(...PAGE_CONTROLLERS);
  }
}
