import { SetMetadata } from '@nestjs/common';
import type { Role } from '../config/app-config';

export const PUBLIC_KEY = 'auth:public';
export const ROLES_KEY = 'auth:roles';

/** No credential needed (only /health and the FHIR CapabilityStatement). */
export const Public = () => SetMetadata(PUBLIC_KEY, true);

/** Roles allowed to call; `admin` is always allowed. Without it, any valid credential passes. */
export const Roles = (...roles: Role[]) => SetMetadata(ROLES_KEY, roles);

export const SESSION_COOKIE_KEY = 'auth:session-cookie';
export const SIGN_IN_KEY = 'auth:sign-in';

/**
 * The route also accepts the audit page's session cookie (browser navigation cannot send a
 * bearer header). Honoured only under /audit, where the cookie's Path scopes it.
 */
export const AllowSessionCookie = () => SetMetadata(SESSION_COOKIE_KEY, true);

/** The sign-in form's target: it checks the submitted token itself (401 when wrong). */
export const SignIn = () => SetMetadata(SIGN_IN_KEY, true);
