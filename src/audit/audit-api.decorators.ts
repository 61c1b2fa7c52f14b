import { applyDecorators, Controller } from '@nestjs/common';
import {
  ApiBearerAuth,
  ApiForbiddenResponse,
  ApiTags,
  ApiUnauthorizedResponse,
} from '@nestjs/swagger';
import { Roles } from '../auth/auth.decorators';

/**
 * A REST controller of the audit tag under `path` for analysts (and admins): bearer
 * credentials, 401 and 403 documented; `forbidden` says who else is turned away.
 */
export const AnalystApi = (path: string, forbidden: string) =>
  applyDecorators(
    Controller(path),
    Roles('analyst'),
    ApiForbiddenResponse({ description: `the credential lacks the role (${forbidden})` }),
    ApiUnauthorizedResponse({ description: 'no or unknown bearer credential' }),
    ApiBearerAuth(),
    ApiTags('audit'),
  );
