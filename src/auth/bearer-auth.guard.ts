import { type CanActivate, type ExecutionContext, Inject, Injectable } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import type { Request } from 'express';
import { AppError } from '../common/app-error';
import type { Role } from '../config/app-config';
import { ApiCredentials } from './api-credentials';
import { PUBLIC_KEY, ROLES_KEY } from './auth.decorators';

export const API_CREDENTIALS = Symbol('API_CREDENTIALS');

export interface AuthenticatedRequest extends Request {
  principal?: { role: Role };
}

/**
 * Every endpoint needs a bearer credential unless marked @Public(). As the upstream does
 * it: a missing or unknown credential is 401, a valid one without the role is 403.
 */
@Injectable()
export class BearerAuthGuard implements CanActivate {
  constructor(
    private readonly reflector: Reflector,
    @Inject(API_CREDENTIALS) private readonly credentials: ApiCredentials,
  ) {}

  canActivate(context: ExecutionContext): boolean {
    const targets = [context.getHandler(), context.getClass()];
    if (this.reflector.getAllAndOverride<boolean>(PUBLIC_KEY, targets)) return true;
    const req = context.switchToHttp().getRequest<AuthenticatedRequest>();
    const header = req.headers.authorization ?? '';
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!match)
      throw new AppError(
        'unauthorized',
        'a bearer credential is required (Authorization: Bearer <token>)',
      );
    const role = this.credentials.roleOf(match[1]!);
    if (!role) throw new AppError('unauthorized', 'the bearer credential is not valid');
    req.principal = { role };
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
