import { applyDecorators, Controller, Get, HttpCode, Post, type Type } from '@nestjs/common';
import {
  ApiBearerAuth,
  ApiBody,
  ApiForbiddenResponse,
  ApiNotFoundResponse,
  ApiOkResponse,
  ApiOperation,
  type ApiOperationOptions,
  ApiParam,
  type ApiParamOptions,
  type ApiResponseOptions,
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

/** The `id` in the path of one record: a UUID. */
const UUID_ID: ApiParamOptions = { name: 'id', format: 'uuid' };

/** `GET path`: one record by its `id` (a UUID), answered `ok`, or 404 (`notFound`). */
export const ApiGetOne = (
  path: string,
  operation: ApiOperationOptions,
  ok: ApiResponseOptions,
  notFound: string,
) =>
  applyDecorators(
    Get(path),
    ApiOperation(operation),
    ApiParam(UUID_ID),
    ApiOkResponse(ok),
    ApiNotFoundResponse({ description: notFound }),
  );

/**
 * `POST path` acting on one record (`id`, a UUID unless `idParam` says otherwise) with the
 * caller's reason in a JSON body (`body`), answered 200 (`ok`).
 */
export const ApiPostWithReason = (
  path: string,
  operation: ApiOperationOptions,
  body: Type<unknown>,
  ok: ApiResponseOptions,
  idParam: ApiParamOptions = UUID_ID,
) =>
  applyDecorators(
    Post(path),
    HttpCode(200),
    ApiOperation(operation),
    ApiParam(idParam),
    ApiBody({ type: body }),
    ApiOkResponse(ok),
  );
