import { createPrivateKey, randomUUID, sign, type KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { AppConfig } from '../config/app-config';

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
}

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
    const res = await fetch(url, { headers: { accept: 'application/json' }, redirect: 'manual' });
    if (!res.ok)
      throw new SmartBackendAuthError(`SMART discovery failed: ${url} answered ${res.status}`);
    const body = (await res.json()) as { token_endpoint?: string };
    if (!body.token_endpoint)
      throw new SmartBackendAuthError('SMART configuration has no token_endpoint');
    // The EHR's own discovery document (read within FHIR_SERVER_URL) names its authorization
    // server, which may sit on another host (SMART App Launch 2.0 §2.1). What it names must
    // still be a plain http(s) URL without user information, https when the EHR is https.
    if (!usableTokenUrl(body.token_endpoint, this.config.fhirBaseUrl))
      throw new SmartBackendAuthError(
        'SMART configuration names an unusable token_endpoint (not http(s), user information, or http under an https EHR); set FHIR_SMART_TOKEN_URL',
      );
    this.tokenUrl = body.token_endpoint;
    return this.tokenUrl;
  }

  private async fetchToken(): Promise<string> {
    const tokenUrl = await this.discoverTokenUrl();
    const assertion = signClientAssertion(this.config, this.key, tokenUrl, this.clock());
    const res = await fetch(tokenUrl, {
      method: 'POST',
      redirect: 'manual',
      headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        scope: this.config.scopes,
        client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer',
        client_assertion: assertion,
      }).toString(),
    });
    if (!res.ok) {
      const text = await res.text().catch(() => '');
      const error = /"error"\s*:\s*"([^"]+)"/.exec(text)?.[1] ?? 'unknown';
      throw new SmartBackendAuthError(`SMART token request refused: ${res.status} ${error}`);
    }
    const body = (await res.json()) as { access_token?: string; expires_in?: number };
    if (!body.access_token)
      throw new SmartBackendAuthError('SMART token response has no access_token');
    this.cached = {
      token: body.access_token,
      expiresAt: this.clock().getTime() + (body.expires_in ?? 300) * 1000,
    };
    return body.access_token;
  }
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
