import { createPrivateKey, randomUUID, sign, type KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { AppConfig } from '../config/app-config';
import { BodyTooLargeError, readBodyText } from '../common/bounded-body';

/**
 * SMART Backend Services (SMART App Launch 2.x, backend-services.html): the client
 * authenticates with a JWT signed by its private key (RS384 or ES384, client-confidential-
 * asymmetric) and receives a short-lived bearer token. Tokens are cached until shortly before
 * they expire. Nothing here is logged: the assertion and the token are secrets.
 */
export interface SmartBackendConfig {
  clientId: string;
  privateKeyPem: string;
  keyId?: string;
  alg: 'RS384' | 'ES384';
  scopes: string;
  /** The token endpoint; when absent it is read from `<fhirBase>/.well-known/smart-configuration`. */
  tokenUrl?: string;
  fhirBaseUrl: string;
  /**
   * Deadline of one discovery or token request, answer included (default 15 s, as the EHR's
   * own reads): every EHR call waits on the one token request in flight.
   */
  timeoutMs?: number;
}

/** Largest discovery document or token answer read (a JWT access token is a few KB). */
export const SMART_MAX_ANSWER_BYTES = 256 * 1024;

export class SmartBackendAuthError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SmartBackendAuthError';
  }
}

export function loadSmartPrivateKey(file: string): string {
  return readFileSync(file, 'utf8');
}

function b64url(data: Buffer | string): string {
  return Buffer.from(data).toString('base64url');
}

/** A signed client assertion JWT (RFC 7523 §3 claims as SMART backend-services asks). */
export function signClientAssertion(
  config: Pick<SmartBackendConfig, 'clientId' | 'keyId' | 'alg'>,
  key: KeyObject,
  audience: string,
  now: Date,
): string {
  const header = { alg: config.alg, typ: 'JWT', ...(config.keyId ? { kid: config.keyId } : {}) };
  const iat = Math.floor(now.getTime() / 1000);
  const claims = {
    iss: config.clientId,
    sub: config.clientId,
    aud: audience,
    exp: iat + 300, // SMART: no more than five minutes in the future
    iat,
    jti: randomUUID(),
  };
  const input = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(claims))}`;
  const signature =
    config.alg === 'ES384'
      ? sign('sha384', Buffer.from(input), { key, dsaEncoding: 'ieee-p1363' })
      : sign('sha384', Buffer.from(input), key);
  return `${input}.${b64url(signature)}`;
}

export class SmartBackendTokenProvider {
  private readonly key: KeyObject;
  private cached?: { token: string; expiresAt: number };
  private tokenUrl?: string;
  private pending?: Promise<string>;

  constructor(
    private readonly config: SmartBackendConfig,
    private readonly clock: () => Date = () => new Date(),
  ) {
    this.key = createPrivateKey(config.privateKeyPem);
    this.tokenUrl = config.tokenUrl;
  }

  async token(): Promise<string> {
    const now = this.clock().getTime();
    if (this.cached && this.cached.expiresAt - 60_000 > now) return this.cached.token;
    this.pending ??= this.fetchToken().finally(() => (this.pending = undefined));
    return this.pending;
  }

  /** Forget the cached token (after a 401 from the FHIR server). */
  invalidate(): void {
    this.cached = undefined;
  }

  private async discoverTokenUrl(): Promise<string> {
    if (this.tokenUrl) return this.tokenUrl;
    const url = `${this.config.fhirBaseUrl.replace(/\/$/, '')}/.well-known/smart-configuration`;
    const body = await this.exchange('SMART discovery', url, {
      headers: { accept: 'application/json' },
    });
    if (!body.ok)
      throw new SmartBackendAuthError(`SMART discovery failed: ${url} answered ${body.status}`);
    if (typeof body.json?.token_endpoint !== 'string' || !body.json.token_endpoint)
      throw new SmartBackendAuthError('SMART configuration has no token_endpoint');
    // The EHR's own discovery document (read within FHIR_SERVER_URL) names its authorization
    // server, which may sit on another host (SMART App Launch 2.0 §2.1). What it names must
    // still be a plain http(s) URL without user information, https when the EHR is https.
    if (!usableTokenUrl(body.json.token_endpoint, this.config.fhirBaseUrl))
      throw new SmartBackendAuthError(
        'SMART configuration names an unusable token_endpoint (not http(s), user information, or http under an https EHR); set FHIR_SMART_TOKEN_URL',
      );
    this.tokenUrl = body.json.token_endpoint;
    return this.tokenUrl;
  }

  private async fetchToken(): Promise<string> {
    const tokenUrl = await this.discoverTokenUrl();
    const assertion = signClientAssertion(this.config, this.key, tokenUrl, this.clock());
    const res = await this.exchange('SMART token request', tokenUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        scope: this.config.scopes,
        client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer',
        client_assertion: assertion,
      }).toString(),
    });
    if (!res.ok) {
      const code = res.json?.error;
      // The OAuth error code only (RFC 6749 §5.2: a short ASCII word), never the whole body.
      const error = typeof code === 'string' && /^[\x20-\x7e]{1,64}$/.test(code) ? code : 'unknown';
      throw new SmartBackendAuthError(`SMART token request refused: ${res.status} ${error}`);
    }
    const token = res.json?.access_token;
    if (typeof token !== 'string' || !/^[\x21-\x7e]+$/.test(token))
      throw new SmartBackendAuthError('SMART token response has no usable access_token');
    this.cached = {
      token,
      expiresAt: this.clock().getTime() + tokenLifetimeSeconds(res.json?.expires_in) * 1000,
    };
    return token;
  }

  /**
   * One request to the discovery document or the token endpoint: a 3xx is an answer (never
   * followed with our assertion), the whole exchange has a deadline, and the answer is read up
   * to SMART_MAX_ANSWER_BYTES. A non-JSON answer has `json` undefined.
   */
  private async exchange(
    what: string,
    url: string,
    init: RequestInit,
  ): Promise<{ ok: boolean; status: number; json?: Record<string, unknown> }> {
    const timeoutMs = this.config.timeoutMs ?? 15_000;
    const signal = AbortSignal.timeout(timeoutMs);
    let status: number;
    let ok: boolean;
    let text: string;
    try {
      const res = await fetch(url, { ...init, redirect: 'manual', signal });
      status = res.status;
      ok = res.ok;
      text = await readBodyText(res.body, SMART_MAX_ANSWER_BYTES).catch((error: unknown) => {
        if (error instanceof BodyTooLargeError)
          throw new SmartBackendAuthError(
            `the SMART answer is larger than ${SMART_MAX_ANSWER_BYTES} bytes; not read`,
          );
        throw error;
      });
    } catch (error) {
      if (error instanceof SmartBackendAuthError) throw error;
      throw new SmartBackendAuthError(
        signal.aborted
          ? `${what} got no complete answer within ${timeoutMs} ms`
          : `${what} failed: ${(error as Error).name}`,
      );
    }
    let json: Record<string, unknown> | undefined;
    try {
      const parsed: unknown = JSON.parse(text);
      if (parsed && typeof parsed === 'object' && !Array.isArray(parsed))
        json = parsed as Record<string, unknown>;
    } catch {
      json = undefined;
    }
    return { ok, status, json };
  }
}

/**
 * `expires_in` (RFC 6749 §5.1: seconds, recommended): absent or unreadable is taken as 300 s
 * (SMART backend services' usual lifetime); 0 or negative means "do not reuse".
 */
function tokenLifetimeSeconds(value: unknown): number {
  const seconds = typeof value === 'string' && /^\d+$/.test(value.trim()) ? Number(value) : value;
  if (typeof seconds !== 'number' || !Number.isFinite(seconds)) return 300;
  return Math.max(0, seconds);
}

function usableTokenUrl(url: string, fhirBase: string): boolean {
  try {
    const u = new URL(url);
    const base = new URL(fhirBase);
    if (u.username || u.password) return false;
    if (u.protocol === 'https:') return true;
    return u.protocol === 'http:' && base.protocol === 'http:';
  } catch {
    return false;
  }
}

/** The SMART Backend Services token source configured for the EHR (FHIR_SMART_*), if any. */
export function smartTokenProvider(
  config: AppConfig,
  scopes: string,
): SmartBackendTokenProvider | undefined {
  return config.FHIR_SERVER_URL && config.FHIR_SMART_CLIENT_ID && config.FHIR_SMART_PRIVATE_KEY_FILE
    ? new SmartBackendTokenProvider({
        clientId: config.FHIR_SMART_CLIENT_ID,
        privateKeyPem: loadSmartPrivateKey(config.FHIR_SMART_PRIVATE_KEY_FILE),
        keyId: config.FHIR_SMART_KEY_ID,
        alg: config.FHIR_SMART_ALG,
        scopes,
        tokenUrl: config.FHIR_SMART_TOKEN_URL,
        fhirBaseUrl: config.FHIR_SERVER_URL,
      })
    : undefined;
}
