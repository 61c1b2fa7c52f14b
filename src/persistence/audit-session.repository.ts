import type { Role } from '../config/app-config';
import { RepositoryBase } from './repository-base';

/** A row of audit_sessions: the audit page's browser sessions, keyed by the id's SHA-256. */
export interface AuditSessionRow {
  role: Role;
  actor: string;
  csrf_token: string;
  expires_at: Date;
}

/** SQL of audit_sessions (auth/audit-session.store.ts makes the ids and hashes them). */
export class AuditSessionRepository extends RepositoryBase {
  async insert(session: {
    idHash: string;
    role: Role;
    actor: string;
    csrfToken: string;
    expiresAt: Date;
  }): Promise<void> {
    await this.db().query(
      `INSERT INTO audit_sessions (id_hash, role, actor, csrf_token, expires_at) VALUES ($1, $2, $3, $4, $5)`,
      [session.idHash, session.role, session.actor, session.csrfToken, session.expiresAt],
    );
  }

  /** The session with this id hash, unless it expired. */
  async findLive(idHash: string): Promise<AuditSessionRow | undefined> {
    const rows: AuditSessionRow[] = await this.db().query(
      `SELECT role, actor, csrf_token, expires_at FROM audit_sessions WHERE id_hash = $1 AND expires_at > now()`,
      [idHash],
    );
    return rows[0];
  }

  async delete(idHash: string): Promise<void> {
    await this.db().query(`DELETE FROM audit_sessions WHERE id_hash = $1`, [idHash]);
  }

  /** Removes expired sessions (run by the audit retention job); returns how many went. */
  async pruneExpired(): Promise<number> {
    const rows: Array<{ n: number }> = await this.db().query(
      `WITH gone AS (DELETE FROM audit_sessions WHERE expires_at <= now() RETURNING 1)
       SELECT count(*)::int AS n FROM gone`,
    );
    return rows[0]?.n ?? 0;
  }
}
