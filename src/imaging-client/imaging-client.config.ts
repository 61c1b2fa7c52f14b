/** What the client needs to know; the lead maps environment variables onto it. */
export interface ImagingClientConfig {
  /** `{base_url}` including `/v1`, e.g. `https://api.example.com/v1`. */
  baseUrl: string;
  clientId: string;
  clientSecret: string;
  organizationId: string;
  retry: RetryConfig;
  timeouts: TimeoutConfig;
  upload: UploadConfig;
  /** Renew the token this long before it expires (bounded to half its lifetime). */
  tokenRenewBeforeMs: number;
  /**
   * After a create that followed an attempt of unknown fate, wait this long and check for a
   * late duplicate (0 disables the check).
   */
  createSettleMs: number;
  /** Hosts presigned upload URLs may name (IMAGING_UPLOAD_HOSTS); empty or absent: any. */
  uploadHosts?: readonly string[];
  /** Basic client credentials: `rfc6749` (form-urlencoded first, default) or `raw`. */
  basicAuthEncoding?: 'rfc6749' | 'raw';
}

export interface RetryConfig {
  /** Attempts per call, the first included. */
  maxAttempts: number;
  /** No retry starts after this long since the call began. */
  deadlineMs: number;
  /** Backoff base: attempt n waits uniformly in [0, min(maxDelayMs, baseDelayMs * 2^(n-1))]. */
  baseDelayMs: number;
  maxDelayMs: number;
}

export interface TimeoutConfig {
  /** Time to the response headers, and between body chunks, for API calls. */
  requestMs: number;
  /** Same for presigned PUTs, which carry up to 100 MB. */
  uploadPartMs: number;
}

export interface UploadConfig {
  /** Part PUTs in flight at once for one upload. */
  partConcurrency: number;
  /** Uploads at once per organization across the adapter (contract limit: 100). */
  maxConcurrentUploads: number;
  /** Presigned URLs this close to expiry are replaced before use. */
  urlRefreshMarginMs: number;
}

export interface RateLimitConfig {
  perEndpointPerMinute: number;
  totalPerMinute: number;
}

export const DEFAULT_RATE_LIMITS: RateLimitConfig = {
  perEndpointPerMinute: 600,
  totalPerMinute: 2000,
};

export function withDefaults(
  config: Pick<ImagingClientConfig, 'baseUrl' | 'clientId' | 'clientSecret' | 'organizationId'> & {
    retry?: Partial<RetryConfig>;
    timeouts?: Partial<TimeoutConfig>;
    upload?: Partial<UploadConfig>;
    tokenRenewBeforeMs?: number;
    createSettleMs?: number;
    uploadHosts?: readonly string[];
    basicAuthEncoding?: 'rfc6749' | 'raw';
  },
): ImagingClientConfig {
  return {
    baseUrl: config.baseUrl.replace(/\/+$/, ''),
    clientId: config.clientId,
    clientSecret: config.clientSecret,
    organizationId: config.organizationId,
    retry: {
      maxAttempts: 6,
      deadlineMs: 120_000,
      baseDelayMs: 250,
      maxDelayMs: 20_000,
      ...config.retry,
    },
    timeouts: { requestMs: 30_000, uploadPartMs: 300_000, ...config.timeouts },
    upload: {
      partConcurrency: 4,
      maxConcurrentUploads: 100,
      urlRefreshMarginMs: 120_000,
      ...config.upload,
    },
    tokenRenewBeforeMs: config.tokenRenewBeforeMs ?? 300_000,
    createSettleMs: config.createSettleMs ?? 3_000,
    uploadHosts: config.uploadHosts ?? [],
    basicAuthEncoding: config.basicAuthEncoding ?? 'rfc6749',
  };
}
