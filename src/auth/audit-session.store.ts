import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { sha256Hex } from '../common/hash';
import type { Role } from '../config/app-config';

/** Cookie of the audit page's browser session (HttpOnly, SameSite=Strict, Path=/audit). */
export const AUDIT_SESSION_COOKIE = 'audit_session';
export const AUDIT_SESSION_PATH = '/audit';
/** Sessions end after 8 hours (one working shift), or at sign-out. */
export const AUDIT_SESSION_TTL_SECONDS = 8 * 60 * 60;

export interface AuditSession {
  role: Role;
  actor: string;
  csrfToken: string;
  expiresAt: Date;
}

/**
 * Browser sessions of the audit page. A browser cannot send a bearer header when it
 * navigates, so the page trades a valid token for an opaque random session id. Only the id's
 * SHA-256 is stored (a database read does not yield a usable cookie), with the role, the
 * actor and a CSRF token for the page's forms.
 */
export class AuditSessionStore {
  constructor(private readonly dataSource: DataSource) {}

  async create(role: Role, actor: string): Promise<{ id: string; session: AuditSession }> {
    const id = randomBytes(32).toString('base64url');
    const csrfToken = randomBytes(24).toString('base64url');
    const expiresAt = new Date(Date.now() + AUDIT_SESSION_TTL_SECONDS * 1000);
    await this.dataSource.query(
      `INSERT INTO audit_sessions (id_hash, role, actor, csrf_token, expires_at) VALUES ($1, $2, $3, $4, $5)`,
      [hashId(id), role, actor, csrfToken, expiresAt],
    );
    return { id, session: { role, actor, csrfToken, expiresAt } };
  }

  async find(id: string): Promise<AuditSession | undefined> {
    if (!/^[\w-]{20,100}$/.test(id)) return undefined;
    const rows: Array<{ role: Role; actor: string; csrf_token: string; expires_at: Date }> =
      await this.dataSource.query(
        `SELECT role, actor, csrf_token, expires_at FROM audit_sessions WHERE id_hash = $1 AND expires_at > now()`,
        [hashId(id)],
      );
    const row = rows[0];
    if (!row) return undefined;
    return {
      role: row.role,
      actor: row.actor,
      csrfToken: row.csrf_token,
      expiresAt: row.expires_at,
    };
  }

  async delete(id: string): Promise<void> {
    await this.dataSource.query(`DELETE FROM audit_sessions WHERE id_hash = $1`, [hashId(id)]);
  }

  /** Removes expired sessions (run by the audit retention job). */
  async pruneExpired(): Promise<number> {
    const rows: Array<{ n: number }> = await this.dataSource.query(
      `WITH gone AS (DELETE FROM audit_sessions WHERE expires_at <= now() RETURNING 1)
       SELECT count(*)::int AS n FROM gone`,
    );
    return rows[0]?.n ?? 0;
  }
}

function hashId(id: string): string {
  return sha256Hex(id);
}

/** Constant-time comparison of a submitted CSRF token with the session's. */
export function csrfMatches(expected: string, submitted: unknown): boolean {
  if (typeof submitted !== 'string') return false;
  const a = Buffer.from(expected);
  const b = Buffer.from(submitted);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** Reads one cookie from a Cookie header (RFC 6265 5.4 syntax). */
export function readCookie(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}
