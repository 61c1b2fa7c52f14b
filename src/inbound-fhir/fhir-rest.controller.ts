import { Controller, Get, Inject, Param, Post, Put, Req, Res, UseFilters } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import type { Request, Response } from 'express';
import { Public, Roles } from '../auth/auth.decorators';
import { FhirError } from './fhir.error';
import { FHIR_FRONT_DOOR_CONFIG } from './inbound-fhir.tokens';
import type { FhirFrontDoorConfig } from './fhir-front-door.config';
import { negotiateFormat, preferReturn, preferStrict, sendResource } from './fhir-http';
import { FhirBundleOperation } from './fhir-bundle.operation';
import type { FhirAnswer } from './fhir-operation.shared';
import { FhirReadOperation } from './fhir-read.operation';
import {
  capabilityStatement,
  ignoredParameterIssue,
  searchParameters,
  searchSet,
} from './fhir-served.resources';
import { callerOf, fhirUrl, restrictionOf, serverBase } from './fhir-request.context';
import { OperationOutcomeFilter } from './operation-outcome.filter';
import { CreateServiceRequestOperation } from './service-request-create.operation';
import { UpdateServiceRequestOperation } from './service-request-update.operation';

const FHIR_ID = /^[A-Za-z0-9\-.]{1,64}$/;

/** The Task search parameters applied (R4 task.html#search): the CapabilityStatement's. */
const TASK_SEARCH_PARAMETERS = ['based-on', '_id'];

function checkId(id: string): void {
  if (!FHIR_ID.test(id)) {
    throw new FhirError('not-found', `"${id}" is not a FHIR id (R4 datatypes.html#id)`);
  }
}

/**
 * The FHIR R4 endpoint: thin; each route reads the request, calls one use case, and sends
 * what it answers with the negotiated media type, Prefer and ETag honoured. For senders,
 * except the public CapabilityStatement.
 */
@ApiExcludeController()
@Controller('fhir')
@UseFilters(OperationOutcomeFilter)
@Roles('sender')
export class FhirRestController {
  constructor(
    private readonly creating: CreateServiceRequestOperation,
    private readonly updating: UpdateServiceRequestOperation,
    private readonly bundles: FhirBundleOperation,
    private readonly reads: FhirReadOperation,
    @Inject(FHIR_FRONT_DOOR_CONFIG) private readonly config: FhirFrontDoorConfig,
  ) {}

  private send(req: Request, res: Response, answer: FhirAnswer): void {
    const format = negotiateFormat(req);
    const prefer =
      answer.resource?.resourceType === 'OperationOutcome' ? 'representation' : preferReturn(req);
    sendResource(res, answer.status, answer.resource, format, {
      prefer,
      location: answer.location ? fhirUrl(req, answer.location) : undefined,
      informational: answer.duplicate ? 'already known: the existing resource is returned' : 'ok',
    });
  }

  @Public()
  @Get('metadata')
  metadata(@Req() req: Request, @Res() res: Response): void {
    const format = negotiateFormat(req);
    sendResource(res, 200, capabilityStatement(serverBase(req), '0.1.0'), format);
  }

  @Post('ServiceRequest')
  async create(@Req() req: Request, @Res() res: Response): Promise<void> {
    // _format and Accept are checked with the body read, so that a 406 is kept (refusals)
    const caller = await callerOf(req, this.config.maxBodyBytes, { keepHead: true });
    const answer = await this.creating.execute(caller, req.header('if-none-exist'));
    this.send(req, res, answer);
  }

  @Get('ServiceRequest/:id')
  async read(@Param('id') id: string, @Req() req: Request, @Res() res: Response): Promise<void> {
    checkId(id);
    const format = negotiateFormat(req);
    sendResource(
      res,
      200,
      await this.reads.readServiceRequest(id, restrictionOf(req, this.config.subscriptionToken)),
      format,
    );
  }

  @Put('ServiceRequest/:id')
  async update(@Param('id') id: string, @Req() req: Request, @Res() res: Response): Promise<void> {
    checkId(id);
    // _format and Accept are checked with the body read, so that a 406 is kept (refusals)
    const caller = await callerOf(req, this.config.maxBodyBytes, { keepHead: true });
    const preconditions = {
      ifMatch: req.header('if-match'),
      ifNoneMatch: req.header('if-none-match'),
    };
    this.send(req, res, await this.updating.execute(caller, id, preconditions));
  }

  @Post()
  async bundle(@Req() req: Request, @Res() res: Response): Promise<void> {
    // _format and Accept are checked with the body read, so that a 406 is kept (refusals)
    const caller = await callerOf(req, this.config.maxBodyBytes, { keepHead: true });
    const answer = await this.bundles.execute(caller);
    if (preferReturn(req) === 'minimal' && answer.resource?.resourceType === 'Bundle') {
      for (const e of (answer.resource as { entry?: Array<{ resource?: unknown }> }).entry ?? [])
        delete e.resource;
    }
    sendResource(res, answer.status, answer.resource, negotiateFormat(req));
  }

  @Get('Task/:id')
  async readTask(
    @Param('id') id: string,
    @Req() req: Request,
    @Res() res: Response,
  ): Promise<void> {
    checkId(id);
    const format = negotiateFormat(req);
    const task = await this.reads.readTask(id, restrictionOf(req, this.config.subscriptionToken));
    sendResource(res, 200, task, format);
  }

  /** Task search: `based-on=ServiceRequest/{id}` (or an absolute URL to it) and `_id` (R4 task.html#search). */
  @Get('Task')
  async searchTasks(@Req() req: Request, @Res() res: Response): Promise<void> {
    const format = negotiateFormat(req);
    const base = serverBase(req);
    const { used, ignored } = searchParameters(
      new URL(req.originalUrl, 'http://query.invalid').searchParams,
      TASK_SEARCH_PARAMETERS,
    );
    if (ignored.length > 0 && preferStrict(req)) {
      throw new FhirError(
        'bad-request',
        `search parameters not supported here: ${ignored.join(', ')}`,
        ignored.map((name) => ignoredParameterIssue(name, 'error')),
      );
    }
    const basedOn = typeof req.query['based-on'] === 'string' ? req.query['based-on'] : undefined;
    const id = typeof req.query._id === 'string' ? req.query._id : undefined;
    const restriction = restrictionOf(req, this.config.subscriptionToken);
    const tasks = await this.reads.searchTasks(basedOn, id, restriction, base);
    sendResource(res, 200, searchSet(tasks, base, 'Task', used, ignored), format);
  }
}
