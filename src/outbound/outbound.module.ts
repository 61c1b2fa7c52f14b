import {
  Inject,
  Injectable,
  Module,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
} from '@nestjs/common';
import type { Logger } from 'pino';
import type { DataSource } from 'typeorm';
import { APP_CONFIG, DATA_SOURCE, LOGGER } from '../common/tokens';
import type { AppConfig } from '../config/app-config';
import { DicomWebResultPublisher } from './dicomweb-result.publisher';
import { FhirResultPublisher } from './fhir-result.publisher';
import { Hl7ResultPublisher } from './hl7-result.publisher';
import { outboundSettings } from './outbound.settings';
import { OutboxWorker } from './outbox.worker';
import { outboxSignal } from './outbox-signal';
import type { Publisher } from './publisher';

/** Builds the publishers of the configured destinations and the worker that drains the outbox. */
export function createOutboxWorker(
  config: AppConfig,
  dataSource: DataSource,
  logger: Logger,
): OutboxWorker {
  const settings = outboundSettings(config);
  const publishers: Publisher[] = [];
  if (config.FHIR_SERVER_URL) {
    publishers.push(
      new FhirResultPublisher({
        baseUrl: config.FHIR_SERVER_URL,
        bearerToken: config.FHIR_SERVER_TOKEN,
        dataSource,
      }),
    );
  }
  if (config.RIS_MLLP_HOST && config.RIS_MLLP_PORT) {
    publishers.push(
      new Hl7ResultPublisher({
        host: config.RIS_MLLP_HOST,
        port: config.RIS_MLLP_PORT,
        responseTimeoutMs: config.RIS_MLLP_TIMEOUT_SECONDS * 1000,
        settings: settings.hl7,
        connections: config.OUTBOUND_CONCURRENCY,
      }),
    );
  }
  if (config.DICOMWEB_URL) {
    publishers.push(
      new DicomWebResultPublisher({
        baseUrl: config.DICOMWEB_URL,
        bearerToken: config.DICOMWEB_TOKEN,
      }),
    );
  }
  return new OutboxWorker({
    dataSource,
    settings,
    publishers,
    logger: logger.child({ component: 'outbox' }),
    pollMs: config.OUTBOUND_POLL_MS,
    concurrency: config.OUTBOUND_CONCURRENCY,
  });
}

@Injectable()
class OutboxWorkerLifecycle implements OnApplicationBootstrap, OnApplicationShutdown {
  private worker?: OutboxWorker;
  private unsubscribe?: () => void;

  constructor(
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(DATA_SOURCE) private readonly dataSource: DataSource,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  onApplicationBootstrap(): void {
    // Same switch as the job queue: a replica without jobs sends nothing.
    if (!this.config.JOBS_ENABLED || !this.config.OUTBOUND_ENABLED) return;
    const worker = createOutboxWorker(this.config, this.dataSource, this.logger);
    this.worker = worker;
    this.unsubscribe = outboxSignal.subscribe(() => worker.kick());
    worker.start();
  }

  async onApplicationShutdown(): Promise<void> {
    this.unsubscribe?.();
    await this.worker?.stop();
  }
}

/** Results back to the clinic: FHIR, HL7 ORU and DICOM SR/PDF publishers and the outbox worker. */
@Module({ providers: [OutboxWorkerLifecycle] })
export class OutboundModule {}
