import { Controller, Delete, Get, Patch, Post, Put, Req, UseFilters } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import type { Request } from 'express';
import { Roles } from '../auth/auth.decorators';
import { FhirError } from './fhir.error';
import { OperationOutcomeFilter } from './operation-outcome.filter';

/** Interactions per supported type (the CapabilityStatement's), for 405 and its Allow header. */
const SUPPORTED: Record<string, { allow: string; what: string }> = {
  ServiceRequest: { allow: 'POST, GET, PUT', what: 'create, read, update' },
  Task: { allow: 'GET', what: 'read, search by based-on' },
};

/**
 * Everything else under /fhir: 405 for an interaction we do not offer on a type we serve,
 * 404 for a resource type (or path) we do not serve (R4 http.html#2.21.0.5). Registered last.
 */
@ApiExcludeController()
@Controller('fhir')
@UseFilters(OperationOutcomeFilter)
@Roles('sender')
export class FhirFallbackController {
  // One route per method rather than @All: that would also register CONNECT/TRACE.
  @Get('*path')
  get(@Req() req: Request): never {
    return unsupported(req);
  }

  @Post('*path')
  post(@Req() req: Request): never {
    return unsupported(req);
  }

  @Put('*path')
  put(@Req() req: Request): never {
    return unsupported(req);
  }

  @Patch('*path')
  patch(@Req() req: Request): never {
    return unsupported(req);
  }

  @Delete('*path')
  delete(@Req() req: Request): never {
    return unsupported(req);
  }
}

function unsupported(req: Request): never {
  const segments = req.path
    .replace(/^\/fhir\/?/, '')
    .split('/')
    .filter(Boolean);
  const type = segments[0] ?? '';
  const supported = SUPPORTED[type];
  if (supported) {
    throw new FhirError(
      'method-not-allowed',
      `${req.method} ${req.path} is not supported: ${type} supports ${supported.what}`,
      [
        {
          severity: 'error',
          code: 'not-supported',
          diagnostics: `${req.method} on ${segments.join('/')} is not supported (${type}: ${supported.what})`,
          expression: [type],
        },
      ],
      { Allow: supported.allow },
    );
  }
  throw new FhirError('not-found', `${req.path} is not served here`, [
    {
      severity: 'error',
      code: 'not-supported',
      diagnostics: /^[A-Z][A-Za-z]+$/.test(type)
        ? `resource type ${type} is not supported (see /fhir/metadata)`
        : `${req.path} is not a supported FHIR endpoint (see /fhir/metadata)`,
    },
  ]);
}
