import { readFileSync } from 'node:fs';
import {
  Inject,
  Injectable,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
} from '@nestjs/common';
import type { Logger } from 'pino';
import { Gauge } from 'prom-client';
import { APP_CONFIG, LOGGER } from '../common/tokens';
import type { AppConfig } from '../config/app-config';
import { MllpServer, type MllpMessageMeta } from '../hl7';
import { siteHl7Mapping } from '../config/site-mappings';
import { metricsRegistry } from '../observability/metrics';
import { OrderIntakeService } from '../orders/order-intake.service';
import { Hl7OrderHandler } from './hl7-order.handler';
import type { Hl7PipelineOptions } from './hl7-order.pipeline';

const openConnections = new Gauge({
  name: 'adapter_mllp_connections',
  help: 'Open inbound MLLP connections',
  registers: [metricsRegistry],
});

/** The MLLP listener's lifecycle: starts with the application, drains on shutdown. */
@Injectable()
export class MllpListenerService implements OnApplicationBootstrap, OnApplicationShutdown {
  private server?: MllpServer;
  private boundPort?: number;
  private handler?: Hl7OrderHandler;

  constructor(
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
    private readonly intake: OrderIntakeService,
  ) {}

  /**
   * Runs stored raw bytes through the same handler as a message on the wire (an admin's
   * reprocess), with the idempotency key given instead of the one derived from MSH.
   */
  async reprocess(
    raw: Buffer,
    options: { idempotencyKey: string; actor: string; remoteAddress: string },
  ): Promise<{ body: Buffer; inboundMessageId?: string; duplicate?: boolean }> {
    this.handler ??= new Hl7OrderHandler(this.intake, this.logger, hl7PipelineOptions(this.config));
    const { body, reply } = await this.handler.process(
      raw,
      { remoteAddress: options.remoteAddress, connectionId: 'reprocess' } satisfies MllpMessageMeta,
      { idempotencyKey: options.idempotencyKey, actor: options.actor },
    );
    return { body, inboundMessageId: reply?.inboundMessageId, duplicate: reply?.duplicate };
  }

  get port(): number | undefined {
    return this.boundPort;
  }

  async onApplicationBootstrap(): Promise<void> {
    const handler = new Hl7OrderHandler(this.intake, this.logger, hl7PipelineOptions(this.config));
    this.handler = handler;
    const tls =
      this.config.MLLP_TLS_CERT_FILE && this.config.MLLP_TLS_KEY_FILE
        ? {
            cert: readFileSync(this.config.MLLP_TLS_CERT_FILE),
            key: readFileSync(this.config.MLLP_TLS_KEY_FILE),
            ...(this.config.MLLP_TLS_CA_FILE
              ? {
                  ca: readFileSync(this.config.MLLP_TLS_CA_FILE),
                  requestCert: true,
                  rejectUnauthorized: true,
                }
              : {}),
          }
        : undefined;
    this.server = new MllpServer({
      handler: (message, meta) => handler.handle(message, meta),
      host: this.config.MLLP_HOST,
      port: this.config.MLLP_PORT,
      maxMessageBytes: this.config.MLLP_MAX_MESSAGE_BYTES,
      frameTimeoutMs: this.config.MLLP_FRAME_TIMEOUT_SECONDS * 1000,
      maxConnections: this.config.MLLP_MAX_CONNECTIONS,
      idleTimeoutMs: this.config.MLLP_IDLE_TIMEOUT_SECONDS * 1000,
      maxInflightBytes: this.config.MLLP_MAX_INFLIGHT_BYTES,
      tls,
      onEvent: (event) => {
        switch (event.type) {
          case 'connection-open':
            openConnections.inc();
            this.logger.debug(
              { connectionId: event.connectionId, remote: event.remoteAddress },
              'mllp connection opened',
            );
            break;
          case 'connection-closed':
            openConnections.dec();
            this.logger.debug({ connectionId: event.connectionId }, 'mllp connection closed');
            break;
          case 'handler-error':
            this.logger.error(
              { connectionId: event.connectionId, err: (event.error as Error)?.message },
              'mllp handler failed',
            );
            break;
          case 'oversize-frame':
          case 'discarded-bytes':
          case 'frame-timeout':
            this.logger.warn(
              { connectionId: event.connectionId, event: event.type },
              'mllp framing problem',
            );
            break;
          case 'idle-timeout':
          case 'connection-evicted':
            this.logger.info(
              { connectionId: event.connectionId, event: event.type },
              'idle mllp connection closed',
            );
            break;
          case 'connection-refused':
            this.logger.warn(
              { remote: event.remoteAddress, reason: event.reason },
              'mllp connection refused',
            );
            break;
          case 'socket-error':
            this.logger.warn(
              { connectionId: event.connectionId, err: event.error.message },
              'mllp socket error',
            );
            break;
          default:
            event satisfies never;
        }
      },
    });
    const address = await this.server.listen();
    this.boundPort = address.port;
    this.logger.info({ port: address.port, tls: Boolean(tls) }, 'MLLP listener ready');
  }

  async onApplicationShutdown(): Promise<void> {
    await this.server?.close();
    this.server = undefined;
  }
}

/**
 * MSH-11 processing IDs accepted (table 0103): HL7_PROCESSING_IDS, else `P` — and `P,T` when
 * the in-process sandbox is the upstream, since a test RIS sends `T` while a site connects.
 */
/** The MLLP front door's reading rules at this site (mapping, processing ids, HL7_MAX_* bounds). */
export function hl7PipelineOptions(config: AppConfig): Hl7PipelineOptions {
  return {
    mapping: siteHl7Mapping(config),
    structure: { allowedProcessingIds: allowedProcessingIds(config) },
    limits: {
      maxSegments: config.HL7_MAX_SEGMENTS,
      maxFieldsPerSegment: config.HL7_MAX_FIELDS,
      maxRepetitions: config.HL7_MAX_REPETITIONS,
      maxComponents: config.HL7_MAX_COMPONENTS,
    },
  };
}

export function allowedProcessingIds(config: AppConfig): readonly string[] {
  return config.HL7_PROCESSING_IDS ?? (config.useEmbeddedSandbox ? ['P', 'T'] : ['P']);
}
