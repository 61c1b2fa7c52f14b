import type { Clock } from './ports';

export interface IssuedToken {
  accessToken: string;
  expiresInSeconds: number;
}

/**
 * Caches the Bearer token and renews it before it expires (contract, Authentication 2:
 * one hour, no refresh grant). However many callers need a token while a renewal runs,
 * exactly one request is in flight; while the old token is still valid they keep using it.
 */
export class TokenProvider {
  private current?: { token: string; expiresAt: number; renewAt: number };
  private renewal?: Promise<string>;

  constructor(
    private readonly issue: () => Promise<IssuedToken>,
    private readonly clock: Clock,
    private readonly renewBeforeMs: number,
  ) {}

  async get(): Promise<string> {
    const now = this.clock.now();
    const current = this.current;
    if (current && now < current.renewAt) return current.token;
    const renewal = this.renew();
    // Keep serving a token that is still valid for a while; only wait when it is (nearly) gone.
    if (current && now < current.expiresAt - 5_000) {
      renewal.catch(() => undefined);
      return current.token;
    }
    return renewal;
  }

  /** After a 401: drop `token` unless a newer one already replaced it. */
  invalidate(token: string): void {
    if (this.current?.token === token) this.current = undefined;
  }

  private renew(): Promise<string> {
    if (!this.renewal) {
      this.renewal = this.issue()
        .then((issued) => {
          const now = this.clock.now();
          const lifetime = issued.expiresInSeconds * 1000;
          const lead = Math.min(this.renewBeforeMs, lifetime / 2);
          this.current = {
            token: issued.accessToken,
            expiresAt: now + lifetime,
            renewAt: now + lifetime - lead,
          };
          return issued.accessToken;
        })
        .finally(() => {
          this.renewal = undefined;
        });
    }
    return this.renewal;
  }
}
