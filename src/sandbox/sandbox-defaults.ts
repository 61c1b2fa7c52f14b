import { randomBytes } from 'node:crypto';
import { LIMITS } from '../imaging-spec/imaging-spec';

// The options the sandbox runs with and their defaults (declarative); sandbox-options.ts reads
// the SANDBOX_* variables over them.

/** A credential the sandbox accepts at `/auth/token`. */
export interface SandboxClient {
  clientId: string;
  clientSecret: string;
  organizationId: string;
  role: 'user' | 'org_admin';
  scopes: ('read' | 'write')[];
}

/** Fault shares (0..1) for one endpoint key; see docs/sandbox.md "Fault injection". */
export interface FaultSpec {
  error5xx?: number;
  rate429?: number;
  slowMs?: number;
  slowShare?: number;
  drop?: number;
  dropAfter?: number;
}

export interface FaultConfig {
  seed?: number;
  endpoints: Record<string, FaultSpec>;
}

/** Durations of the simulated pipeline steps, in seconds before `timeScale` is applied. */
export interface StepSeconds {
  received: number;
  queued: number;
  eligibility: number;
  qcPassed: number;
  preprocessing: number;
  analysis: number;
  review: number;
  bypassVerdict: number;
  qcBypass: number;
  expiry: number;
}

export interface SandboxOptions {
  /** How client credentials are read from Basic (SANDBOX_BASIC_AUTH_ENCODING): rfc6749 | raw. */
  basicAuthEncoding?: 'rfc6749' | 'raw';
  port: number;
  host: string;
  clients: SandboxClient[];
  /** Multiplies every pipeline step duration (1 = seconds as in `steps`). */
  timeScale: number;
  steps: StepSeconds;
  dataDir: string;
  rateLimitPerEndpoint: number;
  rateLimitPerIp: number;
  /** Connections held at once (SANDBOX_MAX_CONNECTIONS); at the bound the idlest gives way. */
  maxConnections: number;
  /** A connection with no request under way for this long is closed (SANDBOX_IDLE_TIMEOUT_SECONDS). */
  idleTimeoutSeconds: number;
  /** yyyy-mm-dd; when set every /v1 response carries the deprecation header. */
  deprecationDate: string | null;
  retired: boolean;
  migrationGuideUrl: string;
  faults: FaultConfig | null;
  signingKey: Buffer;
  /** 'real' follows the wall clock (tests may still advance it); 'manual' only moves on advance(). */
  clock: 'real' | 'manual';
  /** How long a QC_FAILED order may still be bypassed, in seconds (not scaled). */
  qcBypassWindowSeconds: number;
  maxConcurrentUploads: number;
  /** Origin used in presigned URLs; defaults to the listening address. */
  publicOrigin: string | null;
  /** Log one line per request to stdout (never query strings: presigned URLs are secrets). */
  logRequests: boolean;
  /**
   * Entries per page of `GET /list-orders` and `GET /reports` (SANDBOX_PAGE_SIZE); null: one
   * answer holds everything, as the contract describes. Paging is an assumption to test
   * clients against, never the contract.
   */
  pageSize: number | null;
  /** How the next page is named (SANDBOX_PAGE_STYLE); see docs/sandbox.md "Paging". */
  pageStyle: PageStyle;
  /**
   * `GET /reports` lists only the reports of the caller's own orders for standard users
   * (SANDBOX_REPORTS_PER_USER). Off by default: the contract says "all reports of the
   * organization not yet retrieved".
   */
  reportsPerUser: boolean;
}

export const PAGE_STYLES = ['next', 'links', 'cursor', 'page-token'] as const;
export type PageStyle = (typeof PAGE_STYLES)[number];

export const DEFAULT_CLIENT: SandboxClient = {
  clientId: 'sandbox-client',
  clientSecret: 'sandbox-secret',
  organizationId: 'sandbox-org',
  role: 'org_admin',
  scopes: ['read', 'write'],
};

export const DEFAULT_STEP_SECONDS: StepSeconds = {
  received: 1,
  queued: 1,
  eligibility: 2,
  qcPassed: 1,
  preprocessing: 2,
  analysis: 3,
  review: 20,
  bypassVerdict: 2,
  qcBypass: 1,
  expiry: 5,
};

export function defaultSandboxOptions(): SandboxOptions {
  return {
    port: 8090,
    host: '127.0.0.1',
    clients: [DEFAULT_CLIENT],
    timeScale: 1,
    steps: { ...DEFAULT_STEP_SECONDS },
    dataDir: '.data/sandbox',
    rateLimitPerEndpoint: LIMITS.requestsPerEndpointPerMinute,
    rateLimitPerIp: LIMITS.requestsPerIpPerMinute,
    // The adapter alone may hold IMAGING_MAX_CONCURRENT_UPLOADS (100) × 4 part PUTs at once.
    maxConnections: 1024,
    // Longer than the keep-alive timeout (65 s), which closes a connection between requests first.
    idleTimeoutSeconds: 70,
    deprecationDate: null,
    retired: false,
    migrationGuideUrl: 'https://example.invalid/imaging-service/migration/v2',
    faults: null,
    signingKey: randomBytes(32),
    clock: 'real',
    qcBypassWindowSeconds: 7 * 24 * 3600,
    maxConcurrentUploads: LIMITS.concurrentUploads,
    publicOrigin: null,
    logRequests: false,
    pageSize: null,
    pageStyle: 'next',
    reportsPerUser: false,
  };
}
