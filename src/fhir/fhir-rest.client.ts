/**
 * The adapter's HTTP client for the EHR's FHIR REST API (R4 http.html): JSON in and out, a
 * bearer token per call, and the limits a client on a hospital network needs, which
 * fhir-kit-client cannot take (it reads every answer whole with `response.text()` and offers
 * no size limit nor a dispatcher Node's fetch accepts; an endless answer from an EHR read took
 * the process to 4.9 GB):
 * - the whole exchange, answer included, ends within `timeoutMs` (a trickling answer too);
 * - an answer is read up to `maxAnswerBytes`, then the connection is dropped;
 * - a 3xx is an answer, never followed: the token does not go where a Location points.
 *
 * A non-2xx answer throws FhirHttpError with `response.status` and `response.data` (the parsed
 * OperationOutcome when there is one).
 */

import { BodyTooLargeError, readBodyText } from '../common/bounded-body';

export const FHIR_DEFAULT_MAX_ANSWER_BYTES = 16 * 1024 * 1024;

/** A non-2xx answer: its status, its body (parsed when JSON) and its Retry-After header. */
export interface FhirHttpAnswer {
  status: number;
  data: unknown;
  retryAfter?: string;
  /** A 3xx's Location header, as the peer wrote it (never followed). */
  location?: string;
}

export class FhirHttpError extends Error {
  readonly response?: FhirHttpAnswer;

  constructor(message: string, response?: FhirHttpAnswer) {
    super(message);
    this.name = 'FhirHttpError';
    if (response) this.response = response;
  }
}

export interface FhirRestClientOptions {
  /** The token for each call (a fixed FHIR_SERVER_TOKEN, or SMART's current one); none: no header. */
  bearerToken?: () => Promise<string | undefined> | string | undefined;
  timeoutMs?: number;
  maxAnswerBytes?: number;
}

/** FHIR search parameters; an array value repeats the parameter (`_include=a&_include=b`). */
export type FhirSearchParams = Record<string, string | number | boolean | Array<string | number>>;

export function searchUrl(base: string, resourceType: string, params: FhirSearchParams): string {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    for (const v of Array.isArray(value) ? value : [value]) query.append(name, String(v));
  }
  const text = query.toString();
  return `${base.replace(/\/+$/, '')}/${resourceType}${text ? `?${text}` : ''}`;
}

export class FhirRestClient {
  private readonly timeoutMs: number;
  private readonly maxAnswerBytes: number;

  constructor(private readonly options: FhirRestClientOptions = {}) {
    this.timeoutMs = options.timeoutMs ?? 15_000;
    this.maxAnswerBytes = options.maxAnswerBytes ?? FHIR_DEFAULT_MAX_ANSWER_BYTES;
  }

  get<T>(url: string, headers: Record<string, string> = {}): Promise<T> {
    return this.exchange<T>('GET', url, undefined, headers);
  }

  post<T>(url: string, body: unknown, headers: Record<string, string> = {}): Promise<T> {
    return this.exchange<T>('POST', url, body, headers);
  }

  put<T>(url: string, body: unknown, headers: Record<string, string> = {}): Promise<T> {
    return this.exchange<T>('PUT', url, body, headers);
  }

  private async exchange<T>(
    method: string,
    url: string,
    body: unknown,
    extraHeaders: Record<string, string>,
  ): Promise<T> {
    const token = await this.options.bearerToken?.();
    const headers: Record<string, string> = {
      accept: 'application/fhir+json',
      ...(body === undefined ? {} : { 'content-type': 'application/fhir+json' }),
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...extraHeaders,
    };
    const signal = AbortSignal.timeout(this.timeoutMs);
    let status: number;
    let text: string;
    let retryAfter: string | undefined;
    let location: string | undefined;
    try {
      const res = await fetch(url, {
        method,
        headers,
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        redirect: 'manual',
        signal,
      });
      status = res.status;
      retryAfter = res.headers.get('retry-after') ?? undefined;
      if (status >= 300 && status < 400) location = res.headers.get('location') ?? undefined;
      text = await readBodyText(res.body, this.maxAnswerBytes);
    } catch (error) {
      if (error instanceof BodyTooLargeError) throw new FhirHttpError(error.message);
      throw new FhirHttpError(
        signal.aborted
          ? `no complete answer within ${this.timeoutMs} ms`
          : `${(error as Error).message}${causeOf(error)}`,
      );
    }
    let data: unknown = {};
    if (text) {
      try {
        data = JSON.parse(text) as unknown;
      } catch {
        data = text;
        if (status >= 200 && status < 300)
          throw new FhirHttpError(`answered ${status} with a body that is not JSON`, {
            status,
            data: text.slice(0, 1000),
          });
      }
    }
    if (status < 200 || status >= 300) {
      throw new FhirHttpError(`answered ${status}`, {
        status,
        data,
        ...(retryAfter === undefined ? {} : { retryAfter }),
        ...(location === undefined ? {} : { location }),
      });
    }
    return data as T;
  }
}

function causeOf(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  const text = cause?.code ?? cause?.message;
  return text ? ` (${text})` : '';
}
