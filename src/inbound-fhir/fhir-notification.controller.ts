import { Controller, Inject, Post, Req, Res, UseFilters } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import type { Request, Response } from 'express';
import { Roles } from '../auth/auth.decorators';
import type { FhirFrontDoorConfig } from './fhir-front-door.config';
import { negotiateFormat, sendResource } from './fhir-http';
import { callerOf } from './fhir-request.context';
import { FHIR_FRONT_DOOR_CONFIG } from './inbound-fhir.tokens';
import { OperationOutcomeFilter } from './operation-outcome.filter';
import { SubscriptionNotificationHandler } from './subscription-notification.handler';

/**
 * The rest-hook endpoint of R4 Subscriptions Backport notifications:
 * POST /fhir/subscription-notifications (set as Subscription.channel.endpoint; the EHR sends
 * our sender bearer token via Subscription.channel.header).
 */
@ApiExcludeController()
@Controller('fhir/subscription-notifications')
@UseFilters(OperationOutcomeFilter)
export class FhirNotificationController {
  constructor(
    private readonly notifications: SubscriptionNotificationHandler,
    @Inject(FHIR_FRONT_DOOR_CONFIG) private readonly config: FhirFrontDoorConfig,
  ) {}

  @Roles('sender')
  @Post()
  async notify(@Req() req: Request, @Res() res: Response): Promise<void> {
    const format = negotiateFormat(req);
    const caller = await callerOf(req, this.config.maxBodyBytes);
    const answer = await this.notifications.handle(caller);
    sendResource(res, answer.status, answer.resource, format);
  }
}
