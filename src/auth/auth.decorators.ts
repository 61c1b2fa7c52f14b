import { SetMetadata } from '@nestjs/common';
import type { Role } from '../config/app-config';

export const PUBLIC_KEY = 'auth:public';
export const ROLES_KEY = 'auth:roles';

/** No credential needed (only /health and the FHIR CapabilityStatement). */
export const Public = () => SetMetadata(PUBLIC_KEY, true);

/** Roles allowed to call; `admin` is always allowed. Without it, any valid credential passes. */
export const Roles = (...roles: Role[]) => SetMetadata(ROLES_KEY, roles);
