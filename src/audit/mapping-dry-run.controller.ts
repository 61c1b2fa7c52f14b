import { Body, HttpCode, Inject, Post } from '@nestjs/common';
import { ApiBadRequestResponse, ApiBody, ApiOkResponse, ApiOperation } from '@nestjs/swagger';
import { APP_CONFIG } from '../common/tokens';
import type { AppConfig } from '../config/app-config';
import { AnalystApi } from './audit-api.decorators';
import { dryRun, type DryRunResult } from './audit-api.dry-run';

/**
 * POST /api/mappings/dry-run: what the front doors would answer and map for a pasted message,
 * with the site's mapping; nothing stored, sent or logged (the caller sees its own input as is).
 */
@AnalystApi('api/mappings', 'analyst or admin')
export class MappingDryRunController {
  constructor(@Inject(APP_CONFIG) private readonly config: AppConfig) {}

  @Post('dry-run')
  @HttpCode(200)
  @ApiOperation({
    summary: 'Dry-run a message through the front doors (analyst, admin)',
    description:
      'Body `{"hl7": "<message text>"}` or `{"fhir": <ServiceRequest or Bundle>}`. Answers the ACK (AA/AE/AR with ERR) or the FHIR status and body we would answer, the OrderRequest(s), the field lineage and the upstream metadata, with the site\'s CONFIG_FILE mapping applied. Nothing is stored or sent; duplicate and state checks against stored orders are not part of a dry run. Bounded by MLLP_MAX_MESSAGE_BYTES / FHIR_MAX_BODY_BYTES and the HL7 parse bounds.',
  })
  @ApiBody({
    schema: {
      oneOf: [
        { type: 'object', properties: { hl7: { type: 'string' } }, required: ['hl7'] },
        { type: 'object', properties: { fhir: { type: 'object' } }, required: ['fhir'] },
      ],
    },
  })
  @ApiOkResponse({ description: 'the answer, orders, lineage and upstream metadata' })
  @ApiBadRequestResponse({ description: 'neither or both of hl7 and fhir, or over the limits' })
  async dryRun(@Body() body: unknown): Promise<DryRunResult> {
    return dryRun(body, this.config);
  }
}
