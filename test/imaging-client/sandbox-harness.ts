import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DataSource } from 'typeorm';
import {
  ImagingClient,
  InMemoryRateLimiter,
  InMemoryUploadProgressStore,
  InMemoryUploadSlots,
  PgRateLimiter,
  PgUploadProgressStore,
  PgUploadSlots,
  StudyUploader,
  UpstreamHealthStatus,
  combineObservers,
  silentLogger,
  systemClock,
  withDefaults,
  type CallRecord,
  type Clock,
  type RateLimitConfig,
  type RateLimiter,
  type RetryConfig,
  type UploadConfig,
  type UploadProgressStore,
} from '../../src/imaging-client';
import { startSandbox, type RunningSandbox } from '../../src/sandbox/sandbox';
import type { SandboxOptions } from '../../src/sandbox/sandbox-options';

/** The sandbox as a peer over real HTTP, with its storage in a throw-away directory. */
export async function startTestSandbox(options: Partial<SandboxOptions> = {}): Promise<{
  sandbox: RunningSandbox;
  close(): Promise<void>;
}> {
  const dataDir = await mkdtemp(join(tmpdir(), 'imaging-client-sandbox-'));
  const sandbox = await startSandbox({ port: 0, dataDir, timeScale: 0.01, ...options });
  return {
    sandbox,
    async close() {
      await sandbox.close();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

export interface ClientUnderTest {
  client: ImagingClient;
  uploader: StudyUploader;
  records: CallRecord[];
  health: UpstreamHealthStatus;
  close(): Promise<void>;
}

/** A client wired as production wires it (PostgreSQL limiter, progress and slots) when a DataSource is given. */
export function buildClient(
  baseUrl: string,
  options: {
    dataSource?: DataSource;
    limits?: RateLimitConfig;
    rateLimiter?: RateLimiter;
    progress?: UploadProgressStore;
    retry?: Partial<RetryConfig>;
    upload?: Partial<UploadConfig>;
    clock?: Clock;
    requestTimeoutMs?: number;
    uploadPartTimeoutMs?: number;
    scope?: string;
    createSettleMs?: number;
    uploadHosts?: string[];
    credentials?: { clientId: string; clientSecret: string };
    basicAuthEncoding?: 'rfc6749' | 'raw';
  } = {},
): ClientUnderTest {
  const clock = options.clock ?? systemClock;
  const records: CallRecord[] = [];
  const health = new UpstreamHealthStatus();
  const ds = options.dataSource;
  const rateLimiter =
    options.rateLimiter ??
    (ds
      ? new PgRateLimiter(ds, {
          limits: options.limits,
          scope: options.scope ?? 'test-egress',
          clock,
        })
      : new InMemoryRateLimiter(options.limits, clock));
  const client = new ImagingClient(
    withDefaults({
      baseUrl,
      clientId: options.credentials?.clientId ?? 'sandbox-client',
      clientSecret: options.credentials?.clientSecret ?? 'sandbox-secret',
      organizationId: 'sandbox-org',
      retry: { baseDelayMs: 20, maxDelayMs: 500, maxAttempts: 8, ...options.retry },
      timeouts: {
        requestMs: options.requestTimeoutMs ?? 5_000,
        ...(options.uploadPartTimeoutMs ? { uploadPartMs: options.uploadPartTimeoutMs } : {}),
      },
      upload: options.upload,
      createSettleMs: options.createSettleMs ?? 300,
      uploadHosts: options.uploadHosts,
      basicAuthEncoding: options.basicAuthEncoding,
    }),
    {
      clock,
      rateLimiter,
      observer: combineObservers({ onCall: (r) => records.push(r) }, health),
      logger: silentLogger,
    },
  );
  const progress =
    options.progress ?? (ds ? new PgUploadProgressStore(ds) : new InMemoryUploadProgressStore());
  const slots = ds
    ? new PgUploadSlots(ds, { limit: options.upload?.maxConcurrentUploads ?? 100, pollMs: 50 })
    : new InMemoryUploadSlots(100);
  const uploader = new StudyUploader(client, { progress, slots, clock, logger: silentLogger });
  return { client, uploader, records, health, close: () => client.close() };
}

/** Polls the order until `done` says so (status polling as the contract recommends, sped up). */
export async function waitForStatus(
  client: ImagingClient,
  orderId: string,
  done: (status: string) => boolean,
  timeoutMs = 20_000,
): Promise<string> {
  const until = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < until) {
    last = (await client.getStatus({ orderId })).status;
    if (done(last)) return last;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`order ${orderId} still ${last} after ${timeoutMs} ms`);
}
