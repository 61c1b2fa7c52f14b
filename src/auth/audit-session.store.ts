import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { sha256Hex } from '../common/hash';
import type { Role } from '../config/app-config';
import { AuditSessionRepository } from '../persistence/audit-session.repository';

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
  private readonly sessions: AuditSessionRepository;

  constructor(dataSource: DataSource) {
    this.sessions = new AuditSessionRepository(dataSource);
  }

  async create(role: Role, actor: string): Promise<{ id: string; session: AuditSession }> {
    const id = randomBytes(32).toString('base64url');
    const csrfToken = randomBytes(24).toString('base64url');
    const expiresAt = new Date(Date.now() + AUDIT_SESSION_TTL_SECONDS * 1000);
    await this.sessions.insert({ idHash: hashId(id), role, actor, csrfToken, expiresAt });
    return { id, session: { role, actor, csrfToken, expiresAt } };
  }

  async find(id: string): Promise<AuditSession | undefined> {
    if (!/^[\w-]{20,100}$/.test(id)) return undefined;
    const row = await this.sessions.findLive(hashId(id));
    if (!row) return undefined;
    return {
      role: row.role,
      actor: row.actor,
      csrfToken: row.csrf_token,
      expiresAt: row.expires_at,
    };
  }

  async delete(id: string): Promise<void> {
    await this.sessions.delete(hashId(id));
  }

  /** Removes expired sessions (run by the audit retention job). */
  async pruneExpired(): Promise<number> {
    return this.sessions.pruneExpired();
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
