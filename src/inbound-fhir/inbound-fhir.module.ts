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
import { EhrOrderIntake } from './ehr-order.intake';
import { FhirBundleOperation } from './fhir-bundle.operation';
import { FhirFallbackController } from './fhir-fallback.controller';
import { fhirFrontDoorConfig, type FhirFrontDoorConfig } from './fhir-front-door.config';
import { FhirNotificationController } from './fhir-notification.controller';
import type { FhirOperationDeps } from './fhir-operation.shared';
import { FhirReadOperation } from './fhir-read.operation';
import { FhirRefusalRecorder } from './fhir-refusal.recorder';
import { FhirResourceRepository } from '../persistence/fhir-resource.repository';
import { FhirRestController } from './fhir-rest.controller';
import { loadFhirDefinitions } from '../fhir/fhir-validator';
import {
  EHR_FHIR_CLIENT,
  FHIR_FRONT_DOOR_CONFIG,
  FHIR_OPERATION_DEPS,
} from './inbound-fhir.tokens';
import { CreateServiceRequestOperation } from './service-request-create.operation';
import { UpdateServiceRequestOperation } from './service-request-update.operation';
import { smartTokenProvider } from '../fhir/smart-backend.auth';
import { SubscriptionCatchUp } from './subscription-catch-up.service';
import { SubscriptionNotificationHandler } from './subscription-notification.handler';
import { RestHookNotificationHandler } from './rest-hook-notification.handler';
import { SubscriptionRegistration } from './subscription-registration.service';
import { SubscriptionRepository } from '../persistence/subscription.repository';

function ehrClient(config: AppConfig): EhrFhirClient | undefined {
  if (!config.FHIR_SERVER_URL) return undefined;
  const smart = smartTokenProvider(config, config.FHIR_SMART_SCOPES);
  return new EhrFhirClient({
    baseUrl: config.FHIR_SERVER_URL,
    bearerToken: smart ? undefined : config.FHIR_SERVER_TOKEN,
    smart,
  });
}

/** A use case built from the shared dependencies alone. */
function operation<T>(type: new (deps: FhirOperationDeps) => T) {
  return {
    provide: type,
    inject: [FHIR_OPERATION_DEPS],
    useFactory: (deps: FhirOperationDeps) => new type(deps),
  };
}

/** The FHIR R4 front door: /fhir REST, Subscription notifications, and the EHR client they read with. */
@Module({
  imports: [OrdersModule],
  // Order matters: the catch-all 404/405 controller is registered last.
  controllers: [FhirNotificationController, FhirRestController, FhirFallbackController],
  // The audit API reprocesses a refused request through the same operations.
  exports: [CreateServiceRequestOperation, FhirBundleOperation],
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
      provide: FHIR_OPERATION_DEPS,
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
        resources: FhirResourceRepository,
        subscriptions: SubscriptionRepository,
        config: FhirFrontDoorConfig,
        ehr: EhrFhirClient | null,
        logger: Logger,
      ): FhirOperationDeps => ({
        intake,
        resources,
        subscriptions,
        config,
        ehr: ehr ?? undefined,
        refusals: new FhirRefusalRecorder(intake, logger),
        logger,
        clock: () => new Date(),
      }),
    },
    operation(CreateServiceRequestOperation),
    operation(UpdateServiceRequestOperation),
    operation(FhirBundleOperation),
    {
      provide: FhirReadOperation,
      inject: [FhirResourceRepository],
      useFactory: (resources: FhirResourceRepository) => new FhirReadOperation(resources),
    },
    operation(EhrOrderIntake),
    operation(SubscriptionRegistration),
    {
      provide: SubscriptionCatchUp,
      inject: [FHIR_OPERATION_DEPS, EhrOrderIntake],
      useFactory: (deps: FhirOperationDeps, orders: EhrOrderIntake) =>
        new SubscriptionCatchUp(deps, orders),
    },
    {
      provide: RestHookNotificationHandler,
      inject: [FHIR_OPERATION_DEPS, EhrOrderIntake, SubscriptionCatchUp],
      useFactory: (deps: FhirOperationDeps, orders: EhrOrderIntake, catchUp: SubscriptionCatchUp) =>
        new RestHookNotificationHandler(deps, orders, catchUp),
    },
    {
      provide: SubscriptionNotificationHandler,
      inject: [FHIR_OPERATION_DEPS, EhrOrderIntake, SubscriptionCatchUp],
      useFactory: (deps: FhirOperationDeps, orders: EhrOrderIntake, catchUp: SubscriptionCatchUp) =>
        new SubscriptionNotificationHandler(deps, orders, catchUp),
    },
  ],
})
export class InboundFhirModule implements OnModuleInit, OnApplicationBootstrap, OnModuleDestroy {
  constructor(
    private readonly registration: SubscriptionRegistration,
    @Inject(EHR_FHIR_CLIENT) private readonly ehr: EhrFhirClient | null,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    // Half a second of definitions loading at boot rather than on the first order.
    loadFhirDefinitions();
  }

  async onApplicationBootstrap(): Promise<void> {
    try {
      await this.registration.ensureSubscription();
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
