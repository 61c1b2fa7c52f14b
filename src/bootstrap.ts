import 'reflect-metadata';
import { join } from 'node:path';
import type { INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import express, { type NextFunction, type Request, type Response } from 'express';
import { DocumentBuilder, SwaggerModule } from '@nestjs/swagger';
import type { Logger } from 'pino';
import type { DataSource } from 'typeorm';
import { AppModule } from './app.module';
import { type LoadedCredentials, loadApiCredentials } from './auth/api-credentials';
import { BodyStallError, bodyStallReason } from './common/body-stall';
import { probeDataDir } from './common/data-dir-probe';
import { refuseAtDoor } from './common/front-door-refusal';
import { scanJson } from './common/json-scan';
import { badPathEscape } from './common/path-escapes';
import { boundedBodyParser } from './common/bounded-body-parser';
import { answerClientErrors } from './common/client-error';
import { HttpConnectionGuard } from './common/http-connections';
import { describeListenError, probeListenPorts } from './common/port-probe';
import { listenPorts } from './config/listen-ports';
import { type AppConfig, describeConfig, loadConfig, maskUrl } from './config/app-config';
import { HttpUpstreamProbe } from './imaging-client/http-upstream.probe';
import { MllpListenerService } from './inbound-hl7/mllp-listener.service';
import { JobQueue } from './jobs/job-queue';
import { createLogger, PinoNestLogger } from './observability/logger';
import { OpenApiDocument } from './observability/openapi.controller';
import { withFrontDoors } from './observability/openapi-front-doors';
import { countGuardClose } from './observability/http-front-door.metrics';
import { requestLogging } from './observability/request-logging.middleware';
import { createDataSource } from './persistence/data-source.factory';
import {
  startEmbeddedPostgres,
  type RunningEmbeddedPostgres,
} from './persistence/embedded-postgres';
import { migrateUnderLock } from './persistence/migrator';

/** Our own REST API's JSON bodies (/api, the audit page's forms). */
const API_MAX_BODY_BYTES = 1024 * 1024;

/** How deeply a JSON body of our REST API may nest (as a FHIR body, fhir-http.ts). */
const API_MAX_JSON_DEPTH = 100;

/**
 * express.json's `verify`: a body nested deeper than API_MAX_JSON_DEPTH is 413 before it is
 * parsed (one linear pass). JSON.parse reads any depth, but what reads the value after it
 * recursively does not: a dry run of `{"fhir": [[[…]]]}` 20,000 levels deep overflowed the
 * stack in JSON.stringify and was a 500.
 */
function refuseDeepJson(_req: unknown, _res: unknown, body: Buffer, encoding: string): void {
  if (!/^utf-?8$/i.test(encoding)) return;
  if (scanJson(body, { maxDepth: API_MAX_JSON_DEPTH }).exceeded !== 'depth') return;
  throw Object.assign(
    new Error(`the request body nests deeper than ${API_MAX_JSON_DEPTH} levels`),
    { status: 413, type: 'entity.too.deep' },
  );
}

/** A problem that stops the boot, reported as one line per problem, without a stack trace. */
export class StartupError extends Error {
  constructor(readonly problems: string[]) {
    super(problems.join('; '));
    this.name = 'StartupError';
  }
}

export interface RunningAdapter {
  httpUrl: string;
  /** The bound MLLP port (useful when MLLP_PORT=0). */
  mllpPort: number;
  config: AppConfig;
  app: INestApplication;
  dataSource: DataSource;
  databaseUrl: string;
  upstreamBaseUrl: string;
  logger: Logger;
  close(): Promise<void>;
}

export interface StartOptions {
  env?: NodeJS.ProcessEnv;
  logger?: Logger;
  /** Print generated API tokens (first start with nothing configured). */
  announce?: (text: string) => void;
}

/**
 * Starts the whole adapter: configuration, database (embedded when DATABASE_URL is unset),
 * migrations, upstream (the in-process sandbox when IMAGING_BASE_URL is unset), HTTP and
 * workers. Used by main.ts and by end-to-end tests.
 */
export async function startAdapter(options: StartOptions = {}): Promise<RunningAdapter> {
  const config = loadConfig(options.env ?? process.env);
  const logger =
    options.logger ??
    createLogger(config.LOG_LEVEL, undefined, {
      format: config.LOG_FORMAT,
      repeatIntervalMs: config.LOG_REPEAT_SECONDS * 1000,
    });
  const announce = options.announce ?? ((text: string) => process.stdout.write(text));
  const cleanups: Array<() => Promise<void>> = [];
  const cleanup = async () => {
    for (const fn of cleanups.reverse()) {
      await fn().catch((err: unknown) =>
        logger.warn({ err: (err as Error).message }, 'shutdown step failed'),
      );
    }
    cleanups.length = 0;
  };

  try {
    logger.info({ config: describeConfig(config) }, 'starting imaging-ai-adapter');

    // Every port we listen on, before the slow steps: a port in use fails within a second.
    const portProblems = [
      ...(await probeListenPorts(listenPorts(config))),
      ...(await probeDataDir(config.DATA_DIR)),
    ];
    if (portProblems.length > 0) throw new StartupError(portProblems);

    let databaseUrl = config.DATABASE_URL;
    if (!databaseUrl) {
      let embedded: RunningEmbeddedPostgres;
      try {
        embedded = await startEmbeddedPostgres({
          dataDir: config.EMBEDDED_PG_DIR,
          log: (line) => logger.debug({ component: 'embedded-postgres' }, line),
        });
      } catch (error) {
        throw new StartupError([`embedded PostgreSQL: ${(error as Error).message}`]);
      }
      cleanups.push(() => embedded.stop());
      databaseUrl = embedded.url;
      logger.info(
        { dataDir: config.EMBEDDED_PG_DIR, port: embedded.port },
        'embedded PostgreSQL started',
      );
    }

    const dataSource = createDataSource({ url: databaseUrl, poolSize: config.DATABASE_POOL_SIZE });
    try {
      await dataSource.initialize();
    } catch (error) {
      throw new StartupError([
        `DATABASE_URL: cannot connect to ${maskUrl(databaseUrl)}: ${describeConnectError(error)}`,
      ]);
    }
    cleanups.push(() => dataSource.destroy());

    if (config.RUN_MIGRATIONS) {
      const report = await migrateUnderLock(dataSource, databaseUrl);
      logger.info({ applied: report.applied }, 'database migrations checked');
    }

    const jobQueue = new JobQueue({
      url: databaseUrl,
      concurrency: config.JOB_CONCURRENCY,
      logger,
      deadWorkerAfterMs: config.JOB_WORKER_DEAD_AFTER_SECONDS * 1000,
    });
    await jobQueue.migrate();
    cleanups.push(() => jobQueue.stop());

    const upstreamBaseUrl =
      config.IMAGING_BASE_URL ?? (await startInProcessSandbox(config, logger, cleanups));

    const loaded = loadApiCredentials({
      apiTokens: config.API_TOKENS,
      apiTokensFile: config.API_TOKENS_FILE,
      generatedFile: join(config.DATA_DIR, 'api-tokens.sha256'),
    });
    const app = await NestFactory.create(
      AppModule.forRoot({
        config,
        logger,
        dataSource,
        databaseUrl,
        credentials: loaded.credentials,
        upstreamBaseUrl,
        upstreamProbe: new HttpUpstreamProbe(upstreamBaseUrl),
        jobQueue,
      }),
      { logger: new PinoNestLogger(logger), bodyParser: false },
    );
    app.getHttpAdapter().getInstance().disable('x-powered-by');
    // An ETag is a version and nothing else (FHIR http.html: W/"versionId"), set where a
    // resource has one. The framework's default hashed every body, errors included: a 412's
    // W/"9d-…" sent back as If-Match was refused for ever.
    app.getHttpAdapter().getInstance().set('etag', false);
    app.use(requestLogging(logger));
    // No answer is cached (by a browser, a proxy) or sniffed into another content type: those
    // that can carry PHI (issue #15), and the rest too (/metrics, /openapi.json, /health, the
    // redirects, a 404), none of which is meant to be kept or rendered as something else.
    app.use((_req: Request, res: Response, next: NextFunction) => {
      res.setHeader('Cache-Control', 'no-store');
      res.setHeader('X-Content-Type-Options', 'nosniff');
      next();
    });
    // A Host that is no host[:port] is 400 (RFC 9112 §3.2): it went into the FHIR Location as
    // it came (`Host: evil.example:1/x?` pushed our path into a query of the caller's choosing).
    app.use((req: Request, res: Response, next: NextFunction) => {
      const host = req.headers.host;
      // Node keeps the first of several Host lines; which one a proxy in front used is unknown.
      const lines = req.rawHeaders.filter(
        (_, i) => i % 2 === 0 && /^host$/i.test(req.rawHeaders[i]!),
      );
      if (lines.length <= 1 && (host === undefined || validHost(host))) return next();
      refuseAtDoor(
        req,
        res,
        400,
        'bad_request',
        lines.length > 1
          ? 'more than one Host header'
          : 'the Host header is not a host name or address with an optional port',
        'invalid',
      );
    });
    // A path whose percent-escapes are no UTF-8 (`/fhir/ServiceRequest/%ff`, a Latin-1 `K%F6nig`
    // in an audit link) is 400 naming the escape, in the front door's own words. The router's
    // "Failed to decode param" came back as problem JSON titled BadRequest, under /fhir too.
    app.use((req: Request, res: Response, next: NextFunction) => {
      const bad = badPathEscape(req.path);
      if (bad === undefined) return next();
      refuseAtDoor(
        req,
        res,
        400,
        'bad_request',
        `the path holds ${bad}, which is no percent-encoded UTF-8: write each character as its UTF-8 bytes, each byte %XX (RFC 3986)`,
        'invalid',
      );
    });
    // A transfer coding other than chunked (`Transfer-Encoding: gzip, chunked`) is not decoded
    // here: 501 (RFC 9112 §6.1). Its bytes were read as the body itself, and refused as bad
    // JSON or a bad multipart, or taken if they happened to parse.
    app.use((req: Request, res: Response, next: NextFunction) => {
      const codings = (req.headers['transfer-encoding'] ?? '')
        .split(',')
        .map((c) => c.trim().toLowerCase())
        .filter(Boolean);
      if (codings.every((c) => c === 'chunked')) return next();
      refuseAtDoor(
        req,
        res,
        501,
        'not_implemented',
        `Transfer-Encoding ${codings.join(', ').slice(0, 60)} is not supported: send the body chunked or with a Content-Length, with no other transfer coding`,
        'not-supported',
      );
    });
    // JSON bodies for our own REST API. /fhir and /dicomweb parse their own bodies (raw bytes
    // are kept for the audit log, and their media types differ).
    // Case-insensitive as the routing is: /FHIR/ServiceRequest reaches the FHIR front door, and
    // its application/json body was taken (and lost) here.
    // Bounded past its limit (boundedBodyParser): a declared length far past it is 413 at once,
    // a chunked body once that far; the parser alone read and dropped it all before answering.
    const json = boundedBodyParser(
      express.json({ limit: API_MAX_BODY_BYTES, verify: refuseDeepJson }),
      API_MAX_BODY_BYTES,
    );
    app.use((req: Request, res: Response, next: NextFunction) => {
      if (/^\/(fhir|dicomweb)(\/|$)/i.test(req.path)) return next();
      json(req, res, (error?: unknown) => {
        // A body cut short by its stall (it may even parse) is never handed on.
        const stalled = bodyStallReason(req);
        next(error ?? (stalled !== undefined ? new BodyStallError(stalled) : undefined));
      });
    });
    mountOpenApi(app);
    // Connections bounded in number and idle time (docs/security.md): Node counts none and keeps
    // a silent one for ever.
    new HttpConnectionGuard(app.getHttpServer(), {
      maxConnections: config.HTTP_MAX_CONNECTIONS,
      maxPerClient: config.HTTP_MAX_CONNECTIONS_PER_CLIENT,
      trustedProxies: config.HTTP_TRUSTED_PROXIES,
      idleTimeoutMs: config.HTTP_IDLE_TIMEOUT_SECONDS * 1000,
      bodyStallMs: config.HTTP_BODY_STALL_SECONDS * 1000,
      bodyMinBytesPerSecond: config.HTTP_BODY_MIN_BYTES_PER_SECOND,
      onClose: countGuardClose,
    });
    answerClientErrors(app.getHttpServer());
    await app.init();
    cleanups.push(() => app.close());

    if (config.JOBS_ENABLED) await jobQueue.start();
    // Shutdown runs the cleanups last first: the job workers finish their running jobs before
    // Nest closes the providers they call (the upstream client, the outbound clients). The
    // other way round, a job whose create answer was lost looked its order up through the
    // closed client (UND_ERR_DESTROYED) and failed with the order created upstream but not
    // recorded. The front doors still take orders meanwhile: stored, their jobs wait in the
    // job outbox for the next start (or another replica).
    cleanups.push(() => jobQueue.stop());

    try {
      await app.listen(config.HTTP_PORT, config.HTTP_HOST);
    } catch (error) {
      throw new StartupError([
        describeListenError(
          { variable: 'HTTP_PORT', port: config.HTTP_PORT, host: config.HTTP_HOST },
          error as NodeJS.ErrnoException,
        ),
      ]);
    }
    const address = app.getHttpServer().address() as { port: number };
    const host =
      config.HTTP_HOST === '0.0.0.0' || config.HTTP_HOST === '::' ? '127.0.0.1' : config.HTTP_HOST;
    const httpUrl = `http://${host}:${address.port}`;
    // The token block (or where the tokens are) is the last thing before "ready", so no route
    // or worker line scrolls it away; generated hashes are stored only now that we listen.
    loaded.persist?.();
    const notice = tokenNotice(loaded, join(config.DATA_DIR, 'api-tokens.sha256'));
    if (notice) announce(notice);
    logger.info(
      { httpUrl, auditUrl: `${httpUrl}/audit`, upstream: maskUrl(upstreamBaseUrl) },
      `imaging-ai-adapter is ready: audit log at ${httpUrl}/audit`,
    );

    return {
      httpUrl,
      mllpPort: app.get(MllpListenerService).port ?? config.MLLP_PORT,
      config,
      app,
      dataSource,
      databaseUrl,
      upstreamBaseUrl,
      logger,
      close: cleanup,
    };
  } catch (error) {
    await cleanup();
    throw error;
  }
}

async function startInProcessSandbox(
  config: AppConfig,
  logger: Logger,
  cleanups: Array<() => Promise<void>>,
): Promise<string> {
  const { startSandbox } = await import('./sandbox/sandbox');
  const sandbox = await startSandbox({
    port: 0,
    host: '127.0.0.1',
    dataDir: join(config.DATA_DIR, 'sandbox'),
  });
  cleanups.push(() => sandbox.close());
  logger.info(
    { baseUrl: sandbox.baseUrl },
    'IMAGING_BASE_URL unset: the upstream sandbox runs in-process',
  );
  return sandbox.baseUrl;
}

/** Our own REST API's OpenAPI document, served at /openapi.json (any valid credential). */
function mountOpenApi(app: INestApplication): void {
  const document = SwaggerModule.createDocument(
    app,
    new DocumentBuilder()
      .setTitle('imaging-ai-adapter')
      .setDescription(
        'Operations, orders and audit API of the imaging-AI adapter, and its FHIR R4 and DICOMweb (STOW-RS) front doors',
      )
      .setVersion('0.1.0')
      // Our tokens are opaque random strings (API_TOKENS, or generated), not JWTs.
      .addBearerAuth(
        {
          type: 'http',
          scheme: 'bearer',
          description:
            'An opaque bearer token (a random string, not a JWT) with a role: sender, analyst or admin (API_TOKENS or generated at first start; `npm run tokens -- --rotate`).',
        },
        'bearer',
      )
      .addSecurityRequirements('bearer')
      .build(),
  );
  // Nest adds bearerFormat JWT to every bearer scheme; ours are opaque random strings.
  const schemes = document.components?.securitySchemes as
    Record<string, { bearerFormat?: string }> | undefined;
  if (schemes?.bearer) delete schemes.bearer.bearerFormat;
  app.get(OpenApiDocument).document = withFrontDoors(document);
}

function tokenNotice(loaded: LoadedCredentials, file: string): string {
  if (loaded.generated) {
    return (
      [
        '',
        'No API_TOKENS configured: generated one bearer token per role. They are shown only now;',
        `their hashes are kept in ${file} (\`npm run tokens -- --rotate\` issues new ones).`,
        ...loaded.generated.map((g) => `  ${g.role.padEnd(8)} ${g.token}`),
        '',
      ].join('\n') + '\n'
    );
  }
  if (loaded.source === 'generated-file') {
    return `API tokens were issued on ${loaded.issuedAt?.toISOString() ?? 'an earlier start'} (hashes in ${file}); \`npm run tokens -- --rotate\` issues new ones.\n`;
  }
  return ''; // configured tokens: nothing to say
}

/** RFC 9110 §7.2 / RFC 3986 §3.2.2: an IP literal, an IPv4 address or a reg-name, and a port. */
function validHost(value: string): boolean {
  const match = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-._~%!$&'()*+,;=]+)(?::(\d{0,5}))?$/.exec(value);
  return match !== null && (match[1] === undefined || match[1] === '' || Number(match[1]) <= 65535);
}

function describeConnectError(error: unknown): string {
  const e = error as NodeJS.ErrnoException & { errors?: Array<{ code?: string; message: string }> };
  const inner = e.errors?.[0];
  if (inner?.code) return `${inner.code} (${inner.message})`;
  if (e.code) return `${e.code} (${e.message})`;
  return e.message;
}
