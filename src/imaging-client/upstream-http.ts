import type { Readable } from 'node:stream';
import { Agent, request } from 'undici';
import { DEPRECATION_HEADER } from '../imaging-spec/imaging-spec';
import type { ImagingClientConfig } from './imaging-client.config';
import {
  codeForStatus,
  extractFileProblems,
  ImagingClientError,
  sanitizeLink,
  sanitizeText,
} from './imaging-client.error';
import {
  WaitBoundExceeded,
  type CallObserver,
  type CallRecord,
  type ClientLogger,
  type Clock,
  type RateLimiter,
} from './ports';
import { parseRetryAfter } from '../common/retry-after';
import { backoffDelayMs, isRetryableStatus } from './retry-policy';
import { readAnswer } from './upstream-answers';
import { checkStorageUrl, presignedUrlSignsContentType } from './storage-url.policy';
import {
  describeErrorBody,
  describeNetworkError,
  formUrlEncode,
  headerValue,
  isNetworkError,
  isRetirementBody,
  parseErrorBody,
} from './upstream-answers';
import {
  MAX_DEPRECATION_WARNING_CHARS,
  MAX_ERROR_BODY_BYTES,
  type AttemptFailure,
  type CallSpec,
  type RetirementState,
  type UpstreamResponse,
} from './upstream-http.types';

export * from './upstream-http.types';
export { headerValue, isRetirementBody, parseErrorBody } from './upstream-answers';

/**
 * One place where every request to the upstream is made: rate limit, token, timeouts,
 * retries with backoff, 401 → renew once, 410 → stop for good, deprecation header, and one
 * CallRecord per logical call for metrics and the audit log.
 */
export class UpstreamHttp {
  private readonly agent: Agent;
  private retiredState?: RetirementState;
  private tokenSource?: { get(): Promise<string>; invalidate(token: string): void };

  constructor(
    private readonly config: ImagingClientConfig,
    private readonly deps: {
      clock: Clock;
      rateLimiter: RateLimiter;
      observer: CallObserver;
      logger: ClientLogger;
      random?: () => number;
    },
  ) {
    this.agent = new Agent({ keepAliveTimeout: 30_000, connections: 64 });
  }

  setTokenSource(source: { get(): Promise<string>; invalidate(token: string): void }): void {
    this.tokenSource = source;
  }

  get retired(): RetirementState | undefined {
    return this.retiredState;
  }

  async close(): Promise<void> {
    await this.agent.close();
  }

  async call<T>(spec: CallSpec<T>): Promise<T> {
    const { clock, observer } = this.deps;
    const started = clock.now();
    const isApi = !spec.presignedUrl;
    const record: CallRecord = {
      operation: spec.operation,
      method: spec.method,
      endpoint: isApi ? spec.path : '<presigned-url>',
      status: null,
      latencyMs: 0,
      attempts: 0,
      orderId: spec.orderId,
      outcome: 'success',
    };
    try {
      const result = await this.attempts(spec, record, started);
      return result;
    } catch (error) {
      record.outcome = 'error';
      const typed =
        error instanceof ImagingClientError
          ? error
          : new ImagingClientError(
              'invalid_response',
              spec.operation,
              'unexpected client failure',
              { cause: error },
            );
      const upstreamCode = machineCodeOf(typed.upstreamError);
      record.error = {
        code: typed.code,
        message: typed.message,
        ...(upstreamCode ? { upstreamCode } : {}),
        ...(typed.adapterNote ? { adapterNote: typed.adapterNote } : {}),
        // The token this call needed failed: the call itself was never sent (health and the
        // audit log name the token, not an endpoint that was never asked).
        ...(typed.operation !== spec.operation ? { operation: typed.operation } : {}),
      };
      throw typed;
    } finally {
      record.latencyMs = clock.now() - started;
      observer.onCall(record);
    }
  }

  private async attempts<T>(spec: CallSpec<T>, record: CallRecord, started: number): Promise<T> {
    const { deadlineMs } = this.config.retry;
    const isApi = !spec.presignedUrl;
    const deadline = started + deadlineMs;
    let reauthorised = false;
    let recovered = 0;
    let failure: AttemptFailure | undefined;

    for (;;) {
      if (isApi && this.retiredState) {
        record.retirement = {
          error: this.retiredState.error,
          migrationGuide: this.retiredState.migrationGuide,
        };
        throw new ImagingClientError(
          'retired',
          spec.operation,
          'the upstream API version is retired; calls stopped',
          {
            status: 410,
            migrationGuide: this.retiredState.migrationGuide,
          },
        );
      }
      if (failure && spec.beforeRetry) {
        const settled = await spec.beforeRetry(failure);
        if (settled !== undefined) return settled;
      }
      record.attempts++;
      let token: string | undefined;
      let response: UpstreamResponse;
      try {
        // Token first: a slot taken while waiting for the token would be budget the token
        // request itself may need (it is rate limited too).
        if (spec.auth === 'bearer') {
          if (!this.tokenSource) throw new Error('no token source configured');
          token = await this.tokenSource.get();
        }
        if (isApi) await this.budget(spec, record, deadline);
        response = await this.send(spec, token, record, deadline);
      } catch (error) {
        if (error instanceof ImagingClientError) throw error;
        if (!isNetworkError(error)) {
          throw new ImagingClientError('network', spec.operation, describeNetworkError(error), {
            cause: error,
            attempts: record.attempts,
          });
        }
        failure = { kind: 'network', error };
        await this.waitBeforeRetry(spec, record, deadline, failure, undefined);
        continue;
      }

      record.status = response.status;
      const deprecation = headerValue(response.headers, DEPRECATION_HEADER);
      // Comes with every answer and goes into every upstream.call audit event and /health:
      // the contract's text is `v1 will be deprecated on <yyyy-mm-dd>`, a peer's may be 16 KB.
      if (isApi && deprecation)
        record.deprecationWarning = deprecation.slice(0, MAX_DEPRECATION_WARNING_CHARS);

      if (response.status >= 200 && response.status < 300) {
        try {
          return spec.parse(response);
        } catch (error) {
          if (error instanceof ImagingClientError) throw error;
          throw new ImagingClientError(
            'invalid_response',
            spec.operation,
            'response does not match the contract',
            {
              status: response.status,
              cause: error,
            },
          );
        }
      }

      if (isApi && response.status === 401 && spec.auth === 'bearer' && token && !reauthorised) {
        // Contract, Errors: 401 → request a new token and retry once.
        reauthorised = true;
        this.tokenSource?.invalidate(token);
        continue;
      }
      if (isApi && response.status === 410) {
        // Retirement only when the body has the contract's shape (Errors table: `error` and
        // `migration_guide`): a 410 from a proxy or gateway must not stop all upstream traffic
        // until a restart; it is an ordinary failure, retried.
        if (isRetirementBody(response)) throw this.retire(spec, record, response);
        failure = { kind: 'status', status: response.status, response };
        await this.waitBeforeRetry(spec, record, deadline, failure, response);
        continue;
      }
      if (isRetryableStatus(response.status)) {
        failure = { kind: 'status', status: response.status, response };
        await this.waitBeforeRetry(spec, record, deadline, failure, response);
        continue;
      }
      if (spec.recover && recovered < 2 && (await spec.recover(response))) {
        recovered++;
        continue;
      }
      const body = parseErrorBody(response);
      const files = extractFileProblems(body);
      const note = redirectNote(response, isApi);
      throw new ImagingClientError(
        codeForStatus(response.status),
        spec.operation,
        `upstream answered ${response.status}${describeErrorBody(body)}${note ? `, ${note}` : ''}`,
        {
          status: response.status,
          adapterNote: note,
          upstreamError: body,
          fileProblems: files?.problems,
          fileProblemsTotal: files?.total,
          attempts: record.attempts,
        },
      );
    }
  }

  /**
   * A slot of the rate limit, waited for no longer than the call's deadline: budget that
   * frees only after it is a `deadline` failure (transient: the job tries again later), not a
   * wait that holds the caller for as long as the budget stays taken.
   */
  private async budget(
    spec: CallSpec<unknown>,
    record: CallRecord,
    deadline: number,
  ): Promise<void> {
    try {
      await this.deps.rateLimiter.acquire(spec.rateLimitKey ?? spec.path, {
        maxWaitMs: Math.max(0, deadline - this.deps.clock.now()),
      });
    } catch (error) {
      if (!(error instanceof WaitBoundExceeded)) throw error;
      throw new ImagingClientError(
        'deadline',
        spec.operation,
        `no rate-limit budget for ${spec.rateLimitKey ?? spec.path} before the call's deadline`,
        { attempts: record.attempts },
      );
    }
  }

  private async waitBeforeRetry(
    spec: CallSpec<unknown>,
    record: CallRecord,
    deadline: number,
    failure: AttemptFailure,
    response: UpstreamResponse | undefined,
  ): Promise<void> {
    const { clock } = this.deps;
    const retryAfter = response
      ? parseRetryAfter(response.headers['retry-after'], clock.now())
      : undefined;
    const exhausted = (
      code: 'deadline' | 'rate_limited_exhausted' | 'server_error_exhausted' | 'network',
      why: string,
    ) =>
      new ImagingClientError(code, spec.operation, why, {
        status: response?.status,
        upstreamError: response ? parseErrorBody(response) : undefined,
        attempts: record.attempts,
        // Not waited out here: the job that made the call comes back no sooner (bounded).
        retryAfterMs: retryAfter,
        cause: failure.kind === 'network' ? failure.error : undefined,
      });
    const lastCode =
      failure.kind === 'network'
        ? ('network' as const)
        : failure.status === 429
          ? ('rate_limited_exhausted' as const)
          : ('server_error_exhausted' as const);
    const what =
      failure.kind === 'network' ? describeNetworkError(failure.error) : `status ${failure.status}`;
    if (record.attempts >= this.config.retry.maxAttempts) {
      throw exhausted(lastCode, `gave up after ${record.attempts} attempts (last: ${what})`);
    }
    const delay = backoffDelayMs(record.attempts, this.config.retry, retryAfter, this.deps.random);
    if (clock.now() + delay > deadline) {
      throw exhausted(
        'deadline',
        `deadline reached after ${record.attempts} attempts (last: ${what})`,
      );
    }
    this.deps.logger.debug(
      { operation: spec.operation, attempt: record.attempts, delayMs: delay, reason: what },
      'upstream call will be retried',
    );
    await clock.sleep(delay);
  }

  private retire(
    spec: CallSpec<unknown>,
    record: CallRecord,
    response: UpstreamResponse,
  ): ImagingClientError {
    const body = parseErrorBody(response);
    // Both are the peer's text, shown on /health, the dashboard and in the log: bounded and
    // sanitised here (a 1 MiB migration_guide was repeated whole on every /health answer).
    const error = sanitizeText(
      typeof body?.error === 'string' ? body.error : 'API version retired',
    );
    const migrationGuide =
      typeof body?.migration_guide === 'string' ? sanitizeLink(body.migration_guide) : '';
    if (!this.retiredState) {
      this.retiredState = { error, migrationGuide, at: this.deps.clock.now() };
      this.deps.logger.error(
        { operation: spec.operation, migrationGuide, upstreamError: error },
        'upstream API version retired (HTTP 410): all upstream calls stopped; migrate',
      );
    }
    record.retirement = { error, migrationGuide };
    return new ImagingClientError('retired', spec.operation, error, {
      status: 410,
      upstreamError: body,
      migrationGuide,
      attempts: record.attempts,
    });
  }

  private async send(
    spec: CallSpec<unknown>,
    token: string | undefined,
    record: CallRecord,
    deadline: number,
  ): Promise<UpstreamResponse> {
    const headers: Record<string, string> = { accept: 'application/json, */*;q=0.5' };
    let body: string | Buffer | Readable | undefined;
    if (spec.json !== undefined) {
      body = Buffer.from(JSON.stringify(spec.json));
      headers['content-type'] = 'application/json';
    } else if (spec.form) {
      body = new URLSearchParams(spec.form).toString();
      headers['content-type'] = 'application/x-www-form-urlencoded';
    } else if (spec.stream) {
      const made = spec.stream();
      body = made.body;
      headers['content-length'] = String(made.length);
      headers['content-type'] = 'application/octet-stream';
    }
    if (spec.auth === 'bearer' && token) headers.authorization = `Bearer ${token}`;
    if (spec.auth === 'basic') {
      // RFC 6749 §2.3.1 form-urlencodes id and secret before Basic (default); some services
      // take plain RFC 7617 Basic instead (IMAGING_BASIC_AUTH_ENCODING=raw).
      const enc = this.config.basicAuthEncoding === 'raw' ? (v: string) => v : formUrlEncode;
      const basic = Buffer.from(
        `${enc(this.config.clientId)}:${enc(this.config.clientSecret)}`,
      ).toString('base64');
      headers.authorization = `Basic ${basic}`;
    }

    let url: string;
    if (spec.presignedUrl) {
      url = await spec.presignedUrl();
      // Checked before any byte leaves: scheme, user information, allowed hosts.
      record.storageHost = checkStorageUrl(
        url,
        { baseUrl: this.config.baseUrl, uploadHosts: this.config.uploadHosts },
        spec.operation,
      );
      // The URL is the credential (contract, Authentication 4): nothing else is sent.
      delete headers.authorization;
      // A Content-Type only where the signature covers one (X-Amz-/X-Goog-SignedHeaders):
      // any header the signer did not sign may make storage refuse the signature.
      if (!presignedUrlSignsContentType(url)) delete headers['content-type'];
    } else {
      const target = new URL(this.config.baseUrl + spec.path);
      for (const [key, value] of Object.entries(spec.query ?? {})) {
        if (value !== undefined) target.searchParams.set(key, String(value));
      }
      url = target.toString();
    }

    const timeout = spec.timeoutMs ?? this.config.timeouts.requestMs;
    // The timeouts above are idle times: a peer that trickles a byte now and then never
    // trips them. An API attempt also ends at the call's deadline (at least `timeout` from
    // now). A presigned PUT carries up to 100 MB, so its sending is bounded by the idle timeout;
    // its answer, once the headers are in, by the timeout in total (below).
    const attemptMs = spec.presignedUrl
      ? undefined
      : Math.max(timeout, deadline - this.deps.clock.now());
    const signal = attemptMs === undefined ? undefined : AbortSignal.timeout(attemptMs);
    let answerTimer: NodeJS.Timeout | undefined;
    let answerLate = false;
    try {
      const response = await request(url, {
        method: spec.method,
        headers,
        body,
        dispatcher: this.agent,
        headersTimeout: timeout,
        bodyTimeout: timeout,
        ...(signal ? { signal } : {}),
      });
      if (spec.presignedUrl) {
        // Storage's answer to a PUT is its headers (the ETag) and at most a short XML error:
        // once the headers are in, the body must end within the timeout, in total (a body
        // trickled a byte a second never trips the idle timeout and would hold the upload,
        // and its slot, for ever), and be no longer than an error body.
        answerTimer = setTimeout(() => {
          answerLate = true;
          response.body.destroy(new Error('storage answer not complete in time'));
        }, timeout);
      }
      return {
        status: response.statusCode,
        headers: response.headers,
        body: await readAnswer(
          response.body,
          spec.operation,
          spec.presignedUrl ? MAX_ERROR_BODY_BYTES : spec.maxAnswerBytes,
        ),
      };
    } catch (error) {
      // A stream body left half-read must not keep its file descriptor open.
      if (
        body &&
        typeof body === 'object' &&
        'destroy' in body &&
        typeof body.destroy === 'function'
      ) {
        body.destroy();
      }
      if (answerLate && !(error instanceof ImagingClientError))
        throw new ImagingClientError(
          'deadline',
          spec.operation,
          `storage's answer did not end within ${timeout} ms of its headers`,
          { attempts: record.attempts },
        );
      if (signal?.aborted && !(error instanceof ImagingClientError))
        throw new ImagingClientError(
          'deadline',
          spec.operation,
          `no complete answer within ${attemptMs} ms (the call's deadline)`,
          { attempts: record.attempts },
        );
      throw error;
    } finally {
      clearTimeout(answerTimer);
    }
  }
}

/**
 * A 3xx is never followed (the request would carry our bearer token, or the study, wherever
 * the Location names): the analyst and operator read where it pointed, as an origin only
 * (a Location is the peer's text: no path, query or control characters are repeated).
 */
function redirectNote(response: UpstreamResponse, isApi: boolean): string | undefined {
  if (response.status < 300 || response.status >= 400) return undefined;
  const location = headerValue(response.headers, 'location');
  let where = 'elsewhere';
  // eslint-disable-next-line no-control-regex
  if (location && !/[\u0000-\u001f\u007f]/.test(location) && /^https?:\/\//i.test(location)) {
    try {
      where = `to host ${new URL(location).host}`;
    } catch {
      where = 'elsewhere';
    }
  }
  const fix = isApi ? 'IMAGING_BASE_URL must be the final address' : 'storage must take the PUT';
  return `a redirect ${where} that is not followed (${fix})`;
}

/** The `error` of an upstream error body when it is a machine code (`invalid_metadata`). */
function machineCodeOf(body: unknown): string | undefined {
  const code =
    body && typeof body === 'object' ? (body as Record<string, unknown>).error : undefined;
  return typeof code === 'string' && /^[A-Za-z][A-Za-z0-9_.-]{0,63}$/.test(code) ? code : undefined;
}
