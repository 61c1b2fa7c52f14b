/**
 * The small interfaces the upstream client depends on. The client never reaches for a
 * clock, a database or a metrics library directly: production wires the PostgreSQL and
 * Prometheus implementations beside this file, unit tests the in-memory ones.
 */

/** Wall-clock time and waiting; injectable so backoff can be tested without real sleeps. */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  sleep(ms: number): Promise<void>;
}

/**
 * Client-side rate limit. `acquire` resolves when one call to `endpoint` (an API path
 * without query, e.g. `/status`) may be made now; the call is counted against both the
 * per-endpoint and the overall budget.
 */
export interface RateLimiter {
  /**
   * Rejects with `WaitBoundExceeded` instead of waiting past `maxWaitMs` (the call's own
   * deadline; default the limiter's own bound): a saturated or stuck budget never holds a
   * caller for ever.
   */
  acquire(endpoint: string, options?: { maxWaitMs?: number }): Promise<void>;
  /**
   * How long a call to `endpoint` would wait for budget if made now (0: at once), without
   * taking any. Lets a job that would only sit waiting give its worker back instead.
   */
  waitMs?(endpoint: string): Promise<number>;
}

/** One finished part of a multipart upload. */
export interface UploadedPart {
  partNumber: number;
  etag: string;
}

/**
 * What survives a restart of the adapter for one multipart upload. Never the presigned
 * URLs: they are credentials, and fresh ones are requested on resume.
 */
export interface MultipartProgress {
  /** Upstream order id the upload belongs to. */
  orderId: string;
  uploadId: string;
  organizationId: string;
  sizeBytes: number;
  partSizeBytes: number;
  partCount: number;
  /** Identifies the file content the parts came from (size + mtime), so a changed file is not stitched together with old parts. */
  fileFingerprint: string;
  parts: UploadedPart[];
}

export interface UploadProgressStore {
  load(orderId: string): Promise<MultipartProgress | null>;
  /** Records a freshly initiated upload (replacing any earlier record for the order). */
  begin(progress: Omit<MultipartProgress, 'parts'>): Promise<void>;
  /** Adds one finished part; safe to call concurrently for different parts. */
  recordPart(orderId: string, uploadId: string, part: UploadedPart): Promise<void>;
  delete(orderId: string): Promise<void>;
  /** Uploads left unfinished (e.g. by a crash), for a resume sweep at startup. */
  listUnfinished(): Promise<MultipartProgress[]>;
}

/** Bounds the uploads running at once for one organization ("Concurrent uploads: 100"). */
export interface UploadSlots {
  /**
   * Resolves with a release function once a slot is held; rejects with `WaitBoundExceeded`
   * when none came free within the store's bound.
   */
  acquire(organizationId: string): Promise<() => Promise<void>>;
}

/** A wait for rate-limit budget or an upload slot that would outlast its bound. */
export class WaitBoundExceeded extends Error {
  constructor(
    readonly what: 'rate-limit budget' | 'upload slot',
    readonly boundMs: number,
  ) {
    super(`no ${what} within ${boundMs} ms`);
    this.name = 'WaitBoundExceeded';
  }
}

export type CallOutcome = 'success' | 'error';

/** One logical call to the upstream (all its attempts), as metrics and the audit log see it. */
export interface CallRecord {
  /** Client operation name, e.g. `new-order`, `multipart-presigned-urls`, `upload-part`. */
  operation: string;
  method: string;
  /** API path without query; `<presigned-url>` for object-storage PUTs (the URL is a secret). */
  endpoint: string;
  /** Last HTTP status seen, null when no response arrived. */
  status: number | null;
  latencyMs: number;
  attempts: number;
  orderId?: string;
  /** Presigned PUTs: the storage host the URL named (audited; the URL itself never is). */
  storageHost?: string;
  outcome: CallOutcome;
  /**
   * `upstreamCode`: the machine code of the upstream's error body (`error`), apart from its
   * words, which the audit page does not show (phi-masking.ts); `adapterNote`: ours on the answer
   * (ImagingClientError.adapterNote), which it does.
   */
  /**
   * `operation`: the operation that failed when it is not this call's own — the token request
   * this call needed first, so this call was never sent (its `status` stays null).
   */
  error?: {
    code: string;
    message: string;
    upstreamCode?: string;
    adapterNote?: string;
    operation?: string;
  };
  /** `X-API-Deprecation-Warning` text when the response carried it. */
  deprecationWarning?: string;
  /** Set on a 410: the version is retired. */
  retirement?: { error: string; migrationGuide: string };
}

export interface CallObserver {
  onCall(record: CallRecord): void;
}

/** pino-compatible logger subset. */
export interface ClientLogger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms))),
};

export const silentLogger: ClientLogger = {
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
};

/** Fans one record out to several observers; one failing observer never breaks a call. */
export function combineObservers(...observers: CallObserver[]): CallObserver {
  return {
    onCall(record) {
      for (const observer of observers) {
        try {
          observer.onCall(record);
        } catch {
          // An observer's bug must not turn a successful upstream call into a failure.
        }
      }
    },
  };
}
