import { Controller, Delete, Inject, Param, Post, Put, Req, Res, UseFilters } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import type { Request, Response } from 'express';
import { Roles } from '../auth/auth.decorators';
import type { FhirFrontDoorConfig } from './fhir-front-door.config';
import { negotiateFormat, sendResource } from './fhir-http';
import { assertSubscriptionChannel, callerOf, fhirBodies } from './fhir-request.context';
import { FHIR_FRONT_DOOR_CONFIG } from './inbound-fhir.tokens';
import { OperationOutcomeFilter } from './operation-outcome.filter';
import { RestHookNotificationHandler } from './rest-hook-notification.handler';
import { SubscriptionNotificationHandler } from './subscription-notification.handler';

/**
 * The rest-hook endpoint of R4 Subscriptions Backport notifications:
 * POST /fhir/subscription-notifications (set as Subscription.channel.endpoint; the EHR sends
 * our sender bearer token via Subscription.channel.header). Classic R4 rest-hook Subscriptions
 * arrive here too: a POST with no body, or PUT/DELETE of `ServiceRequest/{id}` under it.
 */
@ApiExcludeController()
@Controller('fhir/subscription-notifications')
@UseFilters(OperationOutcomeFilter)
export class FhirNotificationController {
  constructor(
    private readonly notifications: SubscriptionNotificationHandler,
    private readonly restHook: RestHookNotificationHandler,
    @Inject(FHIR_FRONT_DOOR_CONFIG) private readonly config: FhirFrontDoorConfig,
  ) {}

  @Roles('sender')
  @Post()
  async notify(@Req() req: Request, @Res() res: Response): Promise<void> {
    assertSubscriptionChannel(req, this.config.subscriptionToken);
    const format = negotiateFormat(req);
    const caller = await callerOf(req, this.config.maxBodyBytes, { keepHead: true });
    // No body: a classic R4 rest-hook Subscription without payload ("something changed").
    const answer = await fhirBodies.run(caller.raw.length, () =>
      caller.raw.toString('utf8').trim() === ''
        ? this.restHook.empty(caller)
        : this.notifications.handle(caller),
    );
    sendResource(res, answer.status, answer.resource, format);
  }

  /** Classic R4 rest-hook with a payload: the EHR's ServiceRequest, created or updated. */
  @Roles('sender')
  @Put('ServiceRequest/:id')
  async updated(@Req() req: Request, @Res() res: Response, @Param('id') id: string): Promise<void> {
    assertSubscriptionChannel(req, this.config.subscriptionToken);
    const format = negotiateFormat(req);
    const caller = await callerOf(req, this.config.maxBodyBytes, { keepHead: true });
    const answer = await fhirBodies.run(caller.raw.length, () => this.restHook.updated(caller, id));
    sendResource(res, answer.status, answer.resource, format);
  }

  /** Classic R4 rest-hook with a payload: the EHR's ServiceRequest was deleted. */
  @Roles('sender')
  @Delete('ServiceRequest/:id')
  async deleted(@Req() req: Request, @Res() res: Response, @Param('id') id: string): Promise<void> {
    assertSubscriptionChannel(req, this.config.subscriptionToken);
    const format = negotiateFormat(req);
    const caller = await callerOf(req, this.config.maxBodyBytes, { keepHead: true });
    const answer = await this.restHook.deleted(caller, id);
    sendResource(res, answer.status, answer.resource, format);
  }
}
