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
import { MllpServer, type MllpMessageMeta, type MllpServerEvent } from '../hl7';
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

interface EventLogLine<E> {
  level: 'debug' | 'info' | 'warn' | 'error';
  message: string;
  fields: (event: E) => Record<string, unknown>;
}

/** How each listener event is logged: level, message, and the fields taken from the event. */
const MLLP_EVENT_LOG: {
  [T in MllpServerEvent['type']]: EventLogLine<Extract<MllpServerEvent, { type: T }>>;
} = {
  'connection-open': {
    level: 'debug',
    message: 'mllp connection opened',
    fields: (e) => ({ connectionId: e.connectionId, remote: e.remoteAddress }),
  },
  'connection-closed': {
    level: 'debug',
    message: 'mllp connection closed',
    fields: (e) => ({ connectionId: e.connectionId }),
  },
  'handler-error': {
    level: 'error',
    message: 'mllp handler failed',
    fields: (e) => ({ connectionId: e.connectionId, err: (e.error as Error)?.message }),
  },
  'oversize-frame': { level: 'warn', message: 'mllp framing problem', fields: eventAndConnection },
  'discarded-bytes': { level: 'warn', message: 'mllp framing problem', fields: eventAndConnection },
  'frame-timeout': { level: 'warn', message: 'mllp framing problem', fields: eventAndConnection },
  'missing-cr': { level: 'info', message: 'mllp frame without CR', fields: eventAndConnection },
  'idle-timeout': {
    level: 'info',
    message: 'idle mllp connection closed',
    fields: eventAndConnection,
  },
  'write-stalled': {
    level: 'warn',
    message: 'mllp peer does not read its acknowledgments; connection closed',
    fields: eventAndConnection,
  },
  'connection-evicted': {
    level: 'info',
    message: 'idle mllp connection closed',
    fields: eventAndConnection,
  },
  'connection-refused': {
    level: 'warn',
    message: 'mllp connection refused',
    fields: (e) => ({ remote: e.remoteAddress, reason: e.reason }),
  },
  'socket-error': {
    level: 'warn',
    message: 'mllp socket error',
    fields: (e) => ({ connectionId: e.connectionId, err: e.error.message }),
  },
};

function eventAndConnection(e: { type: string; connectionId: string }): Record<string, unknown> {
  return { connectionId: e.connectionId, event: e.type };
}

function logMllpEvent(logger: Logger, event: MllpServerEvent): void {
  // The table is keyed by event type, so the entry found takes this very event.
  const entry = MLLP_EVENT_LOG[event.type] as EventLogLine<MllpServerEvent>;
  logger[entry.level](entry.fields(event), entry.message);
}

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
      maxConnectionsPerClient: this.config.MLLP_MAX_CONNECTIONS_PER_CLIENT,
      idleTimeoutMs: this.config.MLLP_IDLE_TIMEOUT_SECONDS * 1000,
      maxInflightBytes: this.config.MLLP_MAX_INFLIGHT_BYTES,
      tls,
      onEvent: (event) => {
        if (event.type === 'connection-open') openConnections.inc();
        if (event.type === 'connection-closed') openConnections.dec();
        logMllpEvent(this.logger, event);
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
