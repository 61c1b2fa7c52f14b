import {
  Controller,
  Delete,
  Get,
  Inject,
  Options,
  Patch,
  Post,
  Put,
  Req,
  UseFilters,
} from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import type { Request } from 'express';
import { Roles } from '../auth/auth.decorators';
import { FhirError } from './fhir.error';
import type { FhirOperationDeps } from './fhir-operation.shared';
import { callerOf } from './fhir-request.context';
import { FHIR_OPERATION_DEPS } from './inbound-fhir.tokens';
import { OperationOutcomeFilter } from './operation-outcome.filter';

/** Interactions per supported type (the CapabilityStatement's), for the 405's diagnostics. */
const SUPPORTED: Record<string, string> = {
  ServiceRequest: 'create, read, update',
  Task: 'read, search by based-on',
};

/**
 * The methods each URL we serve answers (RFC 9110 §10.2.1: Allow lists the methods of the
 * target resource, not of its type). It said `POST, GET, PUT` for every ServiceRequest URL:
 * a `GET /fhir/ServiceRequest` was refused with an Allow naming GET.
 */
const ALLOW: ReadonlyArray<[RegExp, string]> = [
  [/^$/, 'POST'],
  [/^metadata$/, 'GET, HEAD'],
  [/^subscription-notifications$/, 'POST'],
  [/^subscription-notifications\/ServiceRequest\/[^/]+$/, 'PUT, DELETE'],
  [/^ServiceRequest$/, 'POST'],
  [/^ServiceRequest\/[^/]+$/, 'GET, HEAD, PUT'],
  [/^Task(\/[^/]+)?$/, 'GET, HEAD'],
];

/**
 * Everything else under /fhir: 405 for an interaction we do not offer on a type we serve,
 * 404 for a resource type (or path) we do not serve (R4 http.html#2.21.0.5). Registered last.
 */
@ApiExcludeController()
@Controller()
@UseFilters(OperationOutcomeFilter)
@Roles('sender')
export class FhirFallbackController {
  constructor(@Inject(FHIR_OPERATION_DEPS) private readonly deps: FhirOperationDeps) {}

  // One route per method rather than @All: that would also register CONNECT/TRACE.
  // `fhir{/*path}` (one route, its tail optional) also matches the base itself (`GET /fhir`
  // was Express's problem+json 404) without listing it as a route of its own.
  @Get('fhir{/*path}')
  get(@Req() req: Request): never {
    return unsupported(req);
  }

  @Post('fhir{/*path}')
  post(@Req() req: Request): Promise<never> {
    return this.refuseKept(req);
  }

  @Put('fhir{/*path}')
  put(@Req() req: Request): Promise<never> {
    return this.refuseKept(req);
  }

  @Patch('fhir{/*path}')
  patch(@Req() req: Request): Promise<never> {
    return this.refuseKept(req);
  }

  @Delete('fhir{/*path}')
  delete(@Req() req: Request): Promise<never> {
    return this.refuseKept(req);
  }

  // OPTIONS is no FHIR interaction (R4 reads capabilities at /metadata): 405 with the Allow of
  // the URL, as an OperationOutcome (it was Express's problem+json 404).
  @Options('fhir{/*path}')
  options(@Req() req: Request): never {
    return unsupported(req);
  }

  /**
   * A refused request that carries a body (a JSON Patch to an order, a resource POSTed to a
   * type we do not serve) is kept like every refused input, for the audit log; it was answered
   * and forgotten. A body too large to keep is answered the same, unrecorded.
   */
  private async refuseKept(req: Request): Promise<never> {
    try {
      return unsupported(req);
    } catch (refusal) {
      const hasBody =
        Number(req.headers['content-length'] ?? 0) > 0 || req.headers['transfer-encoding'];
      if (hasBody && refusal instanceof FhirError) {
        const caller = await callerOf(req, this.deps.config.maxBodyBytes).catch(() => undefined);
        if (caller) {
          await this.deps.refusals.record(
            caller,
            'fhir-rest',
            `${req.method} ${req.path}`,
            refusal,
          );
        }
      }
      throw refusal;
    }
  }
}

function unsupported(req: Request): never {
  const segments = req.path
    .replace(/^\/fhir\/?/i, '')
    .split('/')
    .filter(Boolean);
  const path = segments.join('/');
  const allow = ALLOW.find(([pattern]) => pattern.test(path))?.[1];
  const type = segments[0] ?? '';
  if (allow !== undefined) {
    const what = Object.hasOwn(SUPPORTED, type) ? ` (${type}: ${SUPPORTED[type]})` : '';
    const at = `/fhir${path ? `/${path}` : ''}`;
    throw new FhirError(
      'method-not-allowed',
      `${req.method} ${at} is not supported: it answers ${allow}`,
      [
        {
          severity: 'error',
          code: 'not-supported',
          diagnostics: `${req.method} on ${at} is not supported; it answers ${allow}${what}`,
          ...(type ? { expression: [type] } : {}),
        },
      ],
      { Allow: allow },
    );
  }
  throw new FhirError('not-found', `${req.path} is not served here`, [
    {
      severity: 'error',
      code: 'not-supported',
      diagnostics: Object.hasOwn(SUPPORTED, type)
        ? `${path}: ${type} supports ${SUPPORTED[type]} (no history, vread or operations; see /fhir/metadata)`
        : /^[A-Z][A-Za-z]+$/.test(type)
          ? `resource type ${type} is not supported (see /fhir/metadata)`
          : `${req.path} is not a supported FHIR endpoint (see /fhir/metadata)`,
    },
  ]);
}
