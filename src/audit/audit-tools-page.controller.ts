import { Body, Get, Inject, Req, Res } from '@nestjs/common';
import type { Response } from 'express';
import type { AuthenticatedRequest } from '../auth/bearer-auth.guard';
import { AppError } from '../common/app-error';
import { APP_CONFIG } from '../common/tokens';
import type { AppConfig } from '../config/app-config';
import { dryRun } from './audit-api.dry-run';
import { AuditPage, FormPost, renderPage } from './audit-page.shared';
import { dryRunPage, mappingsPage } from './audit-page.views';
import { activeMappingTables } from './mapping-tables.view';

/** The audit page's tools: the mapping tables in force and the mapping dry run. */
@AuditPage()
export class AuditToolsPageController {
  constructor(@Inject(APP_CONFIG) private readonly config: AppConfig) {}

  @Get('mappings')
  mappings(@Req() req: AuthenticatedRequest, @Res() res: Response): void {
    renderPage(req, res, (ctx) => mappingsPage(ctx, activeMappingTables(this.config)));
  }

  @Get('dry-run')
  dryRunForm(@Req() req: AuthenticatedRequest, @Res() res: Response): void {
    renderPage(req, res, (ctx) => dryRunPage(ctx, { kind: 'hl7', input: '' }));
  }

  /** The dry-run form's target: nothing is stored, sent or logged of the pasted input. */
  @FormPost('dry-run')
  async dryRun(
    @Body() body: Record<string, unknown> | undefined,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    const kind = body?.kind === 'fhir' ? 'fhir' : 'hl7';
    const input = typeof body?.input === 'string' ? body.input : '';
    try {
      const result = await dryRun({ [kind]: input }, this.config);
      renderPage(req, res, (ctx) => dryRunPage(ctx, { kind, input }, result));
    } catch (error) {
      if (!(error instanceof AppError)) throw error;
      renderPage(
        req,
        res,
        (ctx) => dryRunPage(ctx, { kind, input }, undefined, error.message),
        400,
      );
    }
  }
}
