import { Global, Module } from '@nestjs/common';
import { readFileSync } from 'node:fs';
import type { Logger } from 'pino';
import type { DataSource } from 'typeorm';
import { backgroundService } from '../common/background-service.provider';
import { APP_CONFIG, DATA_SOURCE, LOGGER } from '../common/tokens';
import type { AppConfig } from '../config/app-config';
import { smartTokenProvider } from '../fhir/smart-backend.auth';
import { AlertWebhookPublisher } from './alert-webhook.publisher';
import { DicomWebResultPublisher } from './dicomweb-result.publisher';
import { FhirResultPublisher } from './fhir-result.publisher';
import { Hl7ResultPublisher } from './hl7-result.publisher';
import { outboundSettings } from './outbound.settings';
import { OutboxWorker } from './outbox.worker';
import { ORDER_EVENTS } from '../orders/order-events';
import { outboxOrderEvents, outboxSignal } from './outbox-signal';
import type { Publisher } from './publisher';
import { type AbortMultipart, UploadAbortPublisher } from './upload-abort.publisher';
import { IMAGING, ImagingClientModule } from '../imaging-client/imaging-client.module';
import type { ProductionImagingClient } from '../imaging-client/imaging-client.factory';

/**
 * Builds the publishers of the configured destinations and the worker that drains the outbox;
 * the upstream's own rows (a multipart upload aborted) go out through `abortMultipart`.
 */
export function createOutboxWorker(
  config: AppConfig,
  dataSource: DataSource,
  logger: Logger,
  abortMultipart: AbortMultipart,
): OutboxWorker {
  const settings = outboundSettings(config);
  const publishers: Publisher[] = [new UploadAbortPublisher(abortMultipart)];
  if (config.FHIR_SERVER_URL) {
    // Our reads' scopes plus writing the Task and the DiagnosticReport.
    const smart = smartTokenProvider(config, withWriteScopes(config.FHIR_SMART_SCOPES));
    publishers.push(
      new FhirResultPublisher({
        baseUrl: config.FHIR_SERVER_URL,
        bearerToken: smart ? undefined : config.FHIR_SERVER_TOKEN,
        smart,
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
        // MLLP over TLS: the RIS's certificate is verified (system CAs, or this CA file).
        ...(config.RIS_MLLP_TLS || config.RIS_MLLP_TLS_CA_FILE
          ? {
              tls: config.RIS_MLLP_TLS_CA_FILE
                ? { ca: readFileSync(config.RIS_MLLP_TLS_CA_FILE) }
                : {},
            }
          : {}),
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
  if (config.ALERT_WEBHOOK_URL) {
    publishers.push(new AlertWebhookPublisher({ url: config.ALERT_WEBHOOK_URL }));
  }
  return new OutboxWorker({
    dataSource,
    settings,
    publishers,
    logger: logger.child({ component: 'outbox' }),
    pollMs: config.OUTBOUND_POLL_MS,
    concurrency: config.OUTBOUND_CONCURRENCY,
    // Renewed while a delivery runs, so it need not outlive the slowest one (an unanswered
    // MLLP message); it is how long a killed worker's rows wait for another worker.
    leaseMs: config.OUTBOX_CLAIM_LEASE_SECONDS * 1000,
  });
}

/** SMART v2 scopes for the conditional updates (`c`reate, `r`ead for the search, `u`pdate). */
export function withWriteScopes(scopes: string): string {
  const list = scopes.split(/\s+/).filter(Boolean);
  for (const wanted of ['system/Task.cru', 'system/DiagnosticReport.cru']) {
    if (!list.includes(wanted)) list.push(wanted);
  }
  return list.join(' ');
}

/**
 * Results back to the clinic: FHIR, HL7 ORU and DICOM SR/PDF publishers and the outbox worker,
 * which also sends the upstream's own rows (the abort of a multipart upload given up).
 * It provides the lifecycle's ORDER_EVENTS port (outbox rows, or nothing when
 * OUTBOUND_ENABLED=false), global so that src/orders depends on the port only.
 */
@Global()
@Module({
  imports: [ImagingClientModule],
  providers: [
    backgroundService(
      'outbox worker',
      [APP_CONFIG, DATA_SOURCE, LOGGER, IMAGING],
      (
        config: AppConfig,
        dataSource: DataSource,
        logger: Logger,
        imaging: ProductionImagingClient,
      ) => {
        // Same switch as the job queue: a replica without jobs sends nothing.
        if (!config.JOBS_ENABLED || !config.OUTBOUND_ENABLED) return undefined;
        const worker = createOutboxWorker(config, dataSource, logger, (uploadId, orderId) =>
          imaging.client.uploads.abortMultipart(uploadId, orderId),
        );
        const unsubscribe = outboxSignal.subscribe(() => worker.kick());
        worker.start();
        return async () => {
          unsubscribe();
          await worker.stop();
        };
      },
    ),
    { provide: ORDER_EVENTS, inject: [APP_CONFIG], useFactory: outboxOrderEvents },
  ],
  exports: [ORDER_EVENTS],
})
export class OutboundModule {}
