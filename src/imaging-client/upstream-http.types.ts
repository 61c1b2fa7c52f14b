import type { Readable } from 'node:stream';

export type HttpMethod = 'GET' | 'POST' | 'PATCH' | 'PUT';

export interface UpstreamResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

/** Why the previous attempt failed, as a retry hook sees it. */
export type AttemptFailure =
  | { kind: 'network'; error: unknown }
  | { kind: 'status'; status: number; response: UpstreamResponse };

export interface CallSpec<T> {
  operation: string;
  method: HttpMethod;
  /** API path below `{base_url}`; for presigned PUTs a label only. */
  path: string;
  /** The endpoint the rate limiter counts (default `path`), e.g. a list's next page. */
  rateLimitKey?: string;
  query?: Record<string, string | number | boolean | undefined>;
  json?: unknown;
  form?: Record<string, string>;
  /** A fresh body per attempt (e.g. a file range stream). */
  stream?: () => { body: Readable; length: number };
  auth: 'bearer' | 'basic' | 'none';
  orderId?: string;
  timeoutMs?: number;
  /** The largest answer read (default MAX_RESPONSE_BYTES). */
  maxAnswerBytes?: number;
  /** Object-storage target (presigned URL): resolved per attempt, no token, no rate limit, never logged. */
  presignedUrl?: () => Promise<string>;
  /** Turns a 2xx response into the result; throw ImagingClientError('invalid_response') on a bad shape. */
  parse: (response: UpstreamResponse) => T;
  /**
   * Runs before every retry. It may finish the call with a value (e.g. the order a timed-out
   * create did make) or throw; `undefined` means "retry as planned".
   */
  beforeRetry?: (failure: AttemptFailure) => Promise<T | undefined>;
  /**
   * Lets a non-retryable status be repaired and retried at once (e.g. a presigned URL that
   * storage refuses as expired gets replaced). Return true to retry.
   */
  recover?: (response: UpstreamResponse) => Promise<boolean>;
}

/** Largest error body parsed (the `files` list of an `invalid_study` answer is kept whole up to this). */
export const MAX_ERROR_BODY_BYTES = 1024 * 1024;

/** The longest deprecation warning kept (as the reachability probe and the metric keep it). */
export const MAX_DEPRECATION_WARNING_CHARS = 200;

/** Largest upstream answer read into memory. */
export const MAX_RESPONSE_BYTES = 32 * 1024 * 1024;

/**
 * Largest page of a list answer (`/list-orders`, `/reports`): 50,000 entries of about 200
 * bytes (MAX_LIST_ENTRIES) fit in half of it; parsing is what costs, on the event loop.
 */
export const MAX_LIST_ANSWER_BYTES = 16 * 1024 * 1024;

/**
 * Largest list read over all its pages: twice what MAX_LIST_ENTRIES entries take, and what
 * one answer may hold (MAX_RESPONSE_BYTES). The entries are held until the last page is in.
 */
export const MAX_LIST_TOTAL_BYTES = MAX_RESPONSE_BYTES;

export interface RetirementState {
  error: string;
  migrationGuide: string;
  at: number;
}
