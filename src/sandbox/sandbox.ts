import { randomBytes } from 'node:crypto';
import { mkdir, readdir, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { HttpConnectionGuard } from '../common/http-connections';
import { DEPRECATION_HEADER } from '../imaging-spec/imaging-spec';
import { registerApiRoutes } from './api-routes';
import { FaultInjector } from './fault-injector';
import { Router, answerWithoutBody, sendError, sendJson, type RequestContext } from './http-router';
import { handleStoragePut } from './object-storage.handler';
import { buildOpenApi } from './openapi-document';
import { OrderLifecycle } from './order-lifecycle';
import { STORAGE_PREFIX, UrlSigner } from './presigned-url';
import { RateLimiter } from './rate-limiter';
import { sampleStudyDicom } from './sample-study';
import { SandboxClock } from './sandbox-clock';
import { defaultSandboxOptions, type SandboxOptions } from './sandbox-options';
import { dataDirs, type SandboxServices } from './sandbox-services';
import { SandboxState } from './sandbox-state';
import { SandboxError } from './sandbox.error';
import { TokenStore, requireScope, type Principal } from './token-store';

export const API_PREFIX = '/v1';
export const SAMPLE_STUDY_PATH = '/sandbox/sample-study.dcm';

export interface RunningSandbox {
  /** e.g. http://127.0.0.1:8090/v1 */
  baseUrl: string;
  port: number;
  options: SandboxOptions;
  /** This instance's own directory under the data dir (objects/, uploads/, tmp/). */
  dataRoot: string;
  clock: SandboxClock;
  state: SandboxState;
  /** Applies every due pipeline step (runs by itself every 100 ms in 'real' clock mode too). */
  tick(): Promise<number>;
  /** Moves the sandbox clock forward and applies what became due. */
  advance(ms: number): Promise<number>;
  close(): Promise<void>;
}

const ANONYMOUS: Principal = {
  clientId: '',
  organizationId: '',
  role: 'user',
  scopes: [],
  expiresAt: 0,
};

/**
 * `dropAfter` fault: the operation runs and takes effect, but its answer never reaches the
 * client (the connection is cut instead), as when a response is lost in the network.
 */
function loseResponse(res: ServerResponse): void {
  const cut = (): ServerResponse => {
    res.socket?.destroy();
    return res;
  };
  res.writeHead = cut as unknown as ServerResponse['writeHead'];
  res.end = cut as unknown as ServerResponse['end'];
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Removes run directories of sandboxes whose process is gone (crashed or killed). */
async function removeStaleRuns(dataDir: string): Promise<void> {
  for (const name of await readdir(dataDir)) {
    const m = /^run-(\d+)-[0-9a-f]+$/.exec(name);
    if (m && !processAlive(Number(m[1])))
      await rm(join(dataDir, name), { recursive: true, force: true });
  }
}

function clientIp(req: IncomingMessage): string {
  return req.socket.remoteAddress ?? 'unknown';
}

export async function startSandbox(
  overrides: Partial<SandboxOptions> = {},
): Promise<RunningSandbox> {
  const options: SandboxOptions = { ...defaultSandboxOptions(), ...overrides };
  // Each instance keeps its objects in its own run directory, so that a sandbox started
  // in-process by the adapter and one started by `npm run sandbox` can share a data dir.
  await mkdir(options.dataDir, { recursive: true });
  await removeStaleRuns(options.dataDir);
  const dataRoot = join(options.dataDir, `run-${process.pid}-${randomBytes(4).toString('hex')}`);
  const dirs = dataDirs(dataRoot);
  await Promise.all(Object.values(dirs).map((d) => mkdir(d, { recursive: true })));

  const clock = new SandboxClock(options.clock);
  const state = new SandboxState();
  const lifecycle = new OrderLifecycle(
    state,
    clock,
    options.steps,
    options.timeScale,
    options.qcBypassWindowSeconds * 1000,
  );
  let origin = '';
  const svc: SandboxServices = {
    options,
    clock,
    state,
    tokens: new TokenStore(options.clients, clock, options.basicAuthEncoding),
    signer: new UrlSigner(options.signingKey),
    lifecycle,
    origin: () => origin,
    dirs,
  };
  const router = new Router();
  registerApiRoutes(router, svc);
  const limiter = new RateLimiter(clock);
  const faults = new FaultInjector(options.faults);
  let openApiCache: Buffer | null = null;

  const log = (line: string): void => {
    if (options.logRequests) console.log(line);
  };

  async function applyFault(
    method: string,
    path: string,
    res: ServerResponse,
  ): Promise<'handled' | 'continue' | 'drop-after'> {
    const decision = faults.decide(method, path);
    if (decision.delayMs > 0) await new Promise((r) => setTimeout(r, decision.delayMs));
    switch (decision.kind) {
      case 'drop':
        res.socket?.destroy();
        return 'handled';
      case 'error':
        sendJson(
          res,
          decision.status,
          {
            error: decision.status === 503 ? 'service_unavailable' : 'internal_error',
            message: 'injected fault (SANDBOX_FAULTS)',
          },
          // A 503 usually says when to come back (RFC 9110 §10.2.3); a 500 does not.
          decision.status === 503 ? { 'Retry-After': '1' } : {},
        );
        return 'handled';
      case 'rate':
        sendJson(
          res,
          429,
          { error: 'rate_limited', message: 'injected fault (SANDBOX_FAULTS)' },
          { 'Retry-After': '1' },
        );
        return 'handled';
      case 'none':
        return decision.dropAfter ? 'drop-after' : 'continue';
      default:
        return decision satisfies never;
    }
  }

  /**
   * "Versioning" 4 and 6: the deprecation header on every response of v1, and 410 for every
   * operation once retired. The presigned PUT is an operation of the v1 table too, so it
   * follows the same rules.
   */
  function versioning(req: IncomingMessage, res: ServerResponse): 'retired' | 'serving' {
    if (options.deprecationDate)
      res.setHeader(DEPRECATION_HEADER, `v1 will be deprecated on ${options.deprecationDate}`);
    if (!options.retired) return 'serving';
    answerWithoutBody(req, res);
    sendJson(res, 410, {
      error: 'API v1 has been retired; use v2 of the Imaging Analysis Service',
      migration_guide: options.migrationGuideUrl,
    });
    return 'retired';
  }

  async function handleApi(
    req: IncomingMessage,
    res: ServerResponse,
    path: string,
    query: URLSearchParams,
  ): Promise<void> {
    const method = req.method ?? 'GET';
    if (versioning(req, res) === 'retired') return;
    const ip = clientIp(req);
    const ipWait = limiter.hit(`ip:${ip}`, options.rateLimitPerIp);
    const epWait =
      ipWait === null
        ? limiter.hit(`ep:${ip}:${method} ${path}`, options.rateLimitPerEndpoint)
        : null;
    const wait = ipWait ?? epWait;
    if (wait !== null) {
      answerWithoutBody(req, res);
      const which =
        ipWait !== null
          ? `${options.rateLimitPerIp} requests per minute per IP address`
          : `${options.rateLimitPerEndpoint} requests per minute per endpoint`;
      sendJson(
        res,
        429,
        {
          error: 'rate_limited',
          message: `rate limit of ${which} exceeded; retry after ${wait} s`,
        },
        { 'Retry-After': String(wait) },
      );
      return;
    }
    if (path === '/openapi.json' && method === 'GET') {
      openApiCache ??= Buffer.from(
        JSON.stringify(buildOpenApi(router.all(), `${origin}${API_PREFIX}`), null, 2),
      );
      res.writeHead(200, {
        'Content-Type': 'application/json; charset=utf-8',
        'Content-Length': String(openApiCache.length),
      });
      res.end(openApiCache);
      return;
    }
    const fault = await applyFault(method, path, res);
    if (fault === 'handled') {
      req.resume();
      return;
    }
    const route = router.match(method, path);
    let principal = ANONYMOUS;
    if (route.doc.permission !== 'none') {
      principal = svc.tokens.authenticate(req);
      if (route.doc.permission === 'read' || route.doc.permission === 'write')
        requireScope(principal, route.doc.permission);
    }
    await lifecycle.tick();
    if (fault === 'drop-after') loseResponse(res);
    const ctx: RequestContext = { req, res, method, path, query, ip };
    await route.handle(ctx, principal);
  }

  const server = createServer((req, res) => {
    const started = Date.now();
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://sandbox.invalid');
    } catch {
      answerWithoutBody(req, res);
      sendJson(res, 400, { error: 'bad_request', message: 'request target is not a valid URL' });
      return;
    }
    const path = url.pathname;
    const done = (): void =>
      log(
        `${req.method} ${path.startsWith(STORAGE_PREFIX) ? `${STORAGE_PREFIX}…` : path} ${res.statusCode} ${Date.now() - started}ms`,
      );
    res.on('finish', done);
    const work = async (): Promise<void> => {
      if (path === API_PREFIX || path.startsWith(`${API_PREFIX}/`)) {
        await handleApi(req, res, path.slice(API_PREFIX.length) || '/', url.searchParams);
      } else if (path.startsWith(STORAGE_PREFIX)) {
        if (versioning(req, res) === 'retired') return;
        const fault = await applyFault(req.method ?? 'PUT', 'storage', res);
        if (fault === 'handled') {
          req.resume();
          return;
        }
        await lifecycle.tick();
        if (fault === 'drop-after') loseResponse(res);
        await handleStoragePut(svc, req, res, path.slice(STORAGE_PREFIX.length), url.searchParams);
      } else if (path === SAMPLE_STUDY_PATH && req.method === 'GET') {
        // Sandbox tooling outside /v1: a synthetic study for demos (docs/sandbox.md).
        const seed = (url.searchParams.get('seed') ?? 'sandbox-sample').slice(0, 100);
        const body = sampleStudyDicom(seed);
        res.writeHead(200, {
          'Content-Type': 'application/dicom',
          'Content-Length': String(body.length),
        });
        res.end(body);
      } else {
        throw new SandboxError(
          404,
          'not_found',
          `nothing at ${path}; the API lives under ${API_PREFIX}`,
        );
      }
    };
    work().catch((err: unknown) => {
      if (res.headersSent || res.destroyed) {
        res.destroy();
        return;
      }
      if (err instanceof SandboxError) {
        answerWithoutBody(req, res);
        sendError(res, err);
        return;
      }
      // Never echo internals; the stack goes to stderr (it carries no request data).
      console.error('[sandbox] unexpected error', err);
      answerWithoutBody(req, res);
      sendJson(res, 500, { error: 'internal_error', message: 'unexpected sandbox error' });
    });
  });
  // Node counts no connections and keeps one that never sends a byte for ever; in-process each
  // is a file handle of the adapter itself. The adapter's own guard, with only its total bound
  // (the idlest giving way) and idle timeout: the sandbox's clients are the adapter and local
  // tools, so no per-client bound, and bodies stay bounded by their size limits (JSON and forms
  // 1 MiB in http-router.ts, uploads by their presigned URL's limit) and Node's request timeout.
  // It stops itself when the server closes. Kept-alive connections last the idle timeout (70 s
  // by default, longer than common client idle timeouts), as the Keep-Alive header says.
  new HttpConnectionGuard(server, {
    maxConnections: options.maxConnections,
    idleTimeoutMs: options.idleTimeoutSeconds * 1000,
    sweepMs: Math.min(1_000, options.idleTimeoutSeconds * 1000),
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const host =
    options.host === '0.0.0.0' || options.host === '::'
      ? '127.0.0.1'
      : options.host.includes(':')
        ? `[${options.host}]`
        : options.host;
  origin = options.publicOrigin ?? `http://${host}:${port}`;

  const timer = setInterval(() => {
    lifecycle.tick().catch((err: unknown) => console.error('[sandbox] pipeline tick failed', err));
    limiter.prune();
    svc.tokens.prune();
  }, 100);
  timer.unref();

  return {
    baseUrl: `${origin}${API_PREFIX}`,
    port,
    options,
    dataRoot,
    clock,
    state,
    tick: () => lifecycle.tick(),
    advance: async (ms: number) => {
      clock.advance(ms);
      return lifecycle.tick();
    },
    close: async () => {
      clearInterval(timer);
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      // State lives in memory: once it is gone, the stored objects belong to no order.
      await rm(dataRoot, { recursive: true, force: true });
    },
  };
}
