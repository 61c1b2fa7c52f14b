import { randomBytes, timingSafeEqual, createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { LIMITS } from '../imaging-spec/imaging-spec';
import type { SandboxClock } from './sandbox-clock';
import type { SandboxClient } from './sandbox-options';
import { SandboxError } from './sandbox.error';

export type Scope = 'read' | 'write';

export interface Principal {
  clientId: string;
  organizationId: string;
  role: SandboxClient['role'];
  scopes: Scope[];
  expiresAt: number;
}

function sameSecret(a: string, b: string): boolean {
  // Hash first so that the comparison is constant-time whatever the lengths.
  const ha = createHash('sha256').update(a).digest();
  const hb = createHash('sha256').update(b).digest();
  return timingSafeEqual(ha, hb);
}

const unauthorized = (
  message: string,
  scheme: 'Basic' | 'Bearer',
  code: 'invalid_client' | 'invalid_token' = 'invalid_token',
): SandboxError =>
  new SandboxError(
    401,
    code,
    message,
    {},
    {
      'WWW-Authenticate':
        scheme === 'Basic' ? 'Basic realm="imaging-sandbox"' : `Bearer error="${code}"`,
    },
  );

/**
 * OAuth 2.0 client credentials (contract "Authentication"): Basic client authentication,
 * opaque bearer tokens valid 3600 s, no refresh grant.
 */
export class TokenStore {
  private readonly tokens = new Map<string, Principal>();

  constructor(
    private readonly clients: SandboxClient[],
    private readonly clock: SandboxClock,
    /** `rfc6749` (id and secret form-urlencoded, §2.3.1) or `raw` (plain RFC 7617 Basic). */
    private readonly basicEncoding: 'rfc6749' | 'raw' = 'rfc6749',
  ) {}

  authenticateClient(req: IncomingMessage): SandboxClient {
    const header = req.headers.authorization;
    if (!header)
      throw unauthorized('HTTP Basic client credentials are required', 'Basic', 'invalid_client');
    const match = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header);
    if (!match)
      throw unauthorized(
        'Authorization must be HTTP Basic with client id and secret',
        'Basic',
        'invalid_client',
      );
    const decoded = Buffer.from(match[1], 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 0)
      throw unauthorized(
        'Basic credentials must be "client_id:client_secret"',
        'Basic',
        'invalid_client',
      );
    // RFC 6749 §2.3.1: id and secret are form-urlencoded before Basic encoding.
    let id: string;
    let secret: string;
    try {
      const form = (v: string) =>
        this.basicEncoding === 'raw' ? v : decodeURIComponent(v.replace(/\+/g, ' '));
      id = form(decoded.slice(0, colon));
      secret = form(decoded.slice(colon + 1));
    } catch {
      throw unauthorized('Basic credentials are not correctly encoded', 'Basic', 'invalid_client');
    }
    const client = this.clients.find((c) => c.clientId === id);
    if (!client || !sameSecret(client.clientSecret, secret)) {
      throw unauthorized('unknown client or wrong secret', 'Basic', 'invalid_client');
    }
    return client;
  }

  issue(
    client: SandboxClient,
    requestedScope: string | null,
  ): { accessToken: string; expiresIn: number; scopes: Scope[] } {
    let scopes: Scope[] = [...client.scopes];
    if (requestedScope !== null && requestedScope.trim() !== '') {
      const asked = requestedScope.trim().split(/\s+/);
      const unknown = asked.filter((s) => !(client.scopes as string[]).includes(s));
      if (unknown.length > 0) {
        throw new SandboxError(
          400,
          'invalid_scope',
          `scope not granted to this client: ${unknown.join(' ')}`,
        );
      }
      scopes = asked as Scope[];
    }
    const accessToken = `sbx_${randomBytes(32).toString('base64url')}`;
    const expiresIn = LIMITS.tokenLifetimeSeconds;
    this.tokens.set(accessToken, {
      clientId: client.clientId,
      organizationId: client.organizationId,
      role: client.role,
      scopes,
      expiresAt: this.clock.now() + expiresIn * 1000,
    });
    return { accessToken, expiresIn, scopes };
  }

  /** 401 for a missing, malformed, unknown or expired bearer token. */
  authenticate(req: IncomingMessage): Principal {
    const header = req.headers.authorization;
    if (!header) throw unauthorized('Authorization: Bearer <ACCESS_TOKEN> is required', 'Bearer');
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!match) throw unauthorized('Authorization must use the Bearer scheme', 'Bearer');
    const principal = this.tokens.get(match[1]);
    if (!principal) throw unauthorized('access token is invalid', 'Bearer');
    if (principal.expiresAt <= this.clock.now()) {
      this.tokens.delete(match[1]);
      throw unauthorized('access token has expired; request a new one', 'Bearer');
    }
    return principal;
  }

  prune(): void {
    const now = this.clock.now();
    for (const [token, p] of this.tokens) if (p.expiresAt <= now) this.tokens.delete(token);
  }
}

/** 403 when a valid token lacks the scope the operation needs. */
export function requireScope(principal: Principal, scope: Scope): void {
  if (!principal.scopes.includes(scope)) {
    throw new SandboxError(
      403,
      'insufficient_scope',
      `this operation needs the "${scope}" permission, which the token does not carry`,
      {},
      {
        'WWW-Authenticate': `Bearer error="insufficient_scope", scope="${scope}"`,
      },
    );
  }
}
