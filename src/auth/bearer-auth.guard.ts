import { type CanActivate, type ExecutionContext, Inject, Injectable } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import type { Request } from 'express';
import type { DataSource } from 'typeorm';
import { AppError } from '../common/app-error';
import { DATA_SOURCE } from '../common/tokens';
import type { Role } from '../config/app-config';
import { ApiCredentials } from './api-credentials';
import {
  AUDIT_SESSION_COOKIE,
  AUDIT_SESSION_PATH,
  type AuditSession,
  AuditSessionStore,
  readCookie,
} from './audit-session.store';
import { PUBLIC_KEY, ROLES_KEY, SESSION_COOKIE_KEY, SIGN_IN_KEY } from './auth.decorators';

export const API_CREDENTIALS = Symbol('API_CREDENTIALS');

export interface Principal {
  role: Role;
  /** Who, for the audit log: the role and a short fingerprint of the token (never the token). */
  actor: string;
  /** How the caller authenticated; `session` requests must carry the session's CSRF token on POST. */
  via: 'bearer' | 'session';
  session?: AuditSession & { id: string };
}

export interface AuthenticatedRequest extends Request {
  principal?: Principal;
}

/** The audit actor of a bearer token: `admin#3fa9c1d2` (first 8 hex digits of its SHA-256). */
export function actorOf(role: Role, token: string): string {
  return `${role}#${ApiCredentials.hash(token).slice(0, 8)}`;
}

/**
 * Every endpoint needs a bearer credential unless marked @Public(). As the upstream does
 * it: a missing or unknown credential is 401, a valid one without the role is 403. Routes
 * marked @AllowSessionCookie() under /audit also accept the audit page's session cookie.
 */
@Injectable()
export class BearerAuthGuard implements CanActivate {
  private readonly sessions: AuditSessionStore;

  constructor(
    private readonly reflector: Reflector,
    @Inject(API_CREDENTIALS) private readonly credentials: ApiCredentials,
    @Inject(DATA_SOURCE) dataSource: DataSource,
  ) {
    this.sessions = new AuditSessionStore(dataSource);
  }

  async canActivate(context: ExecutionContext): Promise<boolean> {
    const targets = [context.getHandler(), context.getClass()];
    if (this.reflector.getAllAndOverride<boolean>(PUBLIC_KEY, targets)) return true;
    const req = context.switchToHttp().getRequest<AuthenticatedRequest>();
    if (this.reflector.getAllAndOverride<boolean>(SIGN_IN_KEY, targets)) {
      // The sign-in form posts the token in its body; the handler answers 401 when unset.
      // Pasted tokens often bring white space: the actor is that of the token without it.
      const posted = (req.body as { token?: unknown } | undefined)?.token;
      const token = typeof posted === 'string' ? posted.trim() : undefined;
      const role = token ? this.credentials.roleOf(token) : undefined;
      if (role) req.principal = { role, actor: actorOf(role, token!), via: 'bearer' };
      return true;
    }
    const header = req.headers.authorization ?? '';
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    const cookieAllowed =
      this.reflector.getAllAndOverride<boolean>(SESSION_COOKIE_KEY, targets) === true &&
      (req.path === AUDIT_SESSION_PATH || req.path.startsWith(`${AUDIT_SESSION_PATH}/`));
    const sessionId =
      !header && cookieAllowed ? readCookie(req.headers.cookie, AUDIT_SESSION_COOKIE) : undefined;
    if (sessionId) {
      const session = await this.sessions.find(sessionId);
      if (!session) throw new AppError('unauthorized', 'the session has expired or was ended');
      req.principal = {
        role: session.role,
        actor: session.actor,
        via: 'session',
        session: { ...session, id: sessionId },
      };
    } else {
      if (!match)
        throw new AppError(
          'unauthorized',
          'a bearer credential is required (Authorization: Bearer <token>)',
        );
      const role = this.credentials.roleOf(match[1]!);
      if (!role) throw new AppError('unauthorized', 'the bearer credential is not valid');
      req.principal = { role, actor: actorOf(role, match[1]!), via: 'bearer' };
    }
    const role = req.principal.role;
    const allowed = this.reflector.getAllAndOverride<Role[] | undefined>(ROLES_KEY, targets);
    if (allowed && role !== 'admin' && !allowed.includes(role)) {
      throw new AppError(
        'forbidden',
        `role ${role} may not use this endpoint (needs ${allowed.join(' or ')})`,
      );
    }
    return true;
  }
}
