import {
  Inject,
  Module,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
  type OnModuleInit,
} from '@nestjs/common';
import type { Logger } from 'pino';
import type { DataSource } from 'typeorm';
import { APP_CONFIG, DATA_SOURCE, LOGGER } from '../common/tokens';
import type { AppConfig } from '../config/app-config';
import { OrderIntakeService } from '../orders/order-intake.service';
import { OrdersModule } from '../orders/orders.module';
import { EhrFhirClient } from './ehr-fhir.client';
import { FhirFallbackController } from './fhir-fallback.controller';
import { fhirFrontDoorConfig, type FhirFrontDoorConfig } from './fhir-front-door.config';
import { FhirNotificationController } from './fhir-notification.controller';
import { FhirOrderService } from './fhir-order.service';
import { FhirResourceRepository } from './fhir-resource.repository';
import { FhirRestController } from './fhir-rest.controller';
import { loadFhirDefinitions } from './fhir-validator';
import { EHR_FHIR_CLIENT, FHIR_FRONT_DOOR_CONFIG } from './inbound-fhir.tokens';
import { loadSmartPrivateKey, SmartBackendTokenProvider } from './smart-backend.auth';
import { SubscriptionNotificationService } from './subscription-notification.service';
import { SubscriptionRepository } from './subscription.repository';

function ehrClient(config: AppConfig): EhrFhirClient | undefined {
  if (!config.FHIR_SERVER_URL) return undefined;
  const smart =
    config.FHIR_SMART_CLIENT_ID && config.FHIR_SMART_PRIVATE_KEY_FILE
      ? new SmartBackendTokenProvider({
          clientId: config.FHIR_SMART_CLIENT_ID,
          privateKeyPem: loadSmartPrivateKey(config.FHIR_SMART_PRIVATE_KEY_FILE),
          keyId: config.FHIR_SMART_KEY_ID,
          alg: config.FHIR_SMART_ALG,
          scopes: config.FHIR_SMART_SCOPES,
          tokenUrl: config.FHIR_SMART_TOKEN_URL,
          fhirBaseUrl: config.FHIR_SERVER_URL,
        })
      : undefined;
  return new EhrFhirClient({
    baseUrl: config.FHIR_SERVER_URL,
    bearerToken: smart ? undefined : config.FHIR_SERVER_TOKEN,
    smart,
  });
}

/** The FHIR R4 front door: /fhir REST, Subscription notifications, and the EHR client they read with. */
@Module({
  imports: [OrdersModule],
  // Order matters: the catch-all 404/405 controller is registered last.
  controllers: [FhirNotificationController, FhirRestController, FhirFallbackController],
  providers: [
    {
      provide: FHIR_FRONT_DOOR_CONFIG,
      inject: [APP_CONFIG],
      useFactory: (config: AppConfig) => fhirFrontDoorConfig(config),
    },
    {
      provide: EHR_FHIR_CLIENT,
      inject: [APP_CONFIG],
      useFactory: (config: AppConfig) => ehrClient(config) ?? null,
    },
    {
      provide: FhirResourceRepository,
      inject: [DATA_SOURCE],
      useFactory: (dataSource: DataSource) => new FhirResourceRepository(dataSource),
    },
    {
      provide: SubscriptionRepository,
      inject: [DATA_SOURCE],
      useFactory: (dataSource: DataSource) => new SubscriptionRepository(dataSource),
    },
    {
      provide: FhirOrderService,
      inject: [
        OrderIntakeService,
        FhirResourceRepository,
        FHIR_FRONT_DOOR_CONFIG,
        EHR_FHIR_CLIENT,
        LOGGER,
      ],
      useFactory: (
        intake: OrderIntakeService,
        store: FhirResourceRepository,
        config: FhirFrontDoorConfig,
        ehr: EhrFhirClient | null,
        logger: Logger,
      ) => new FhirOrderService(intake, store, config, ehr ?? undefined, logger),
    },
    {
      provide: SubscriptionNotificationService,
      inject: [
        OrderIntakeService,
        FhirResourceRepository,
        SubscriptionRepository,
        FHIR_FRONT_DOOR_CONFIG,
        EHR_FHIR_CLIENT,
        LOGGER,
      ],
      useFactory: (
        intake: OrderIntakeService,
        store: FhirResourceRepository,
        subscriptions: SubscriptionRepository,
        config: FhirFrontDoorConfig,
        ehr: EhrFhirClient | null,
        logger: Logger,
      ) =>
        new SubscriptionNotificationService(
          intake,
          store,
          subscriptions,
          config,
          ehr ?? undefined,
          logger,
        ),
    },
  ],
})
export class InboundFhirModule implements OnModuleInit, OnApplicationBootstrap, OnModuleDestroy {
  constructor(
    private readonly notifications: SubscriptionNotificationService,
    @Inject(EHR_FHIR_CLIENT) private readonly ehr: EhrFhirClient | null,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    // Half a second of definitions loading at boot rather than on the first order.
    loadFhirDefinitions();
  }

  async onApplicationBootstrap(): Promise<void> {
    try {
      await this.notifications.ensureSubscription();
    } catch (error) {
      // Not fatal: orders can still be POSTed; the operator sees why in the log.
      this.logger.error(
        { err: (error as Error).message },
        'could not create the Subscription on the EHR',
      );
    }
  }

  async onModuleDestroy(): Promise<void> {
    await this.ehr?.close();
  }
}
