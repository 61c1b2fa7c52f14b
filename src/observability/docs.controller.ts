import { readFileSync } from 'node:fs';
import { Controller, Get, NotFoundException, Param, Res, UseFilters } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import type { Response } from 'express';
import { AllowSessionCookie, Public, Roles } from '../auth/auth.decorators';
import { AuditPageFilter } from '../audit/audit-page.filter';
import { OpenApiDocument } from './openapi.controller';

/** Swagger UI's files, from the swagger-ui-dist package @nestjs/swagger depends on. */
const ASSETS: Record<string, { file: string; type: string }> = {
  'swagger-ui.css': { file: 'swagger-ui.css', type: 'text/css; charset=utf-8' },
  'swagger-ui-bundle.js': {
    file: 'swagger-ui-bundle.js',
    type: 'text/javascript; charset=utf-8',
  },
};
const INIT_JS = `window.addEventListener('load', function () {
  window.ui = SwaggerUIBundle({ url: '/audit/docs/openapi.json', dom_id: '#swagger-ui', deepLinking: true });
});\n`;

function assetPath(file: string): string {
  return require.resolve(`swagger-ui-dist/${file}`);
}

const PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>imaging-ai-adapter API</title>
<link rel="stylesheet" href="/audit/docs/assets/swagger-ui.css"></head>
<body><p><a href="/audit">← Audit log</a></p><div id="swagger-ui"></div>
<script src="/audit/docs/assets/swagger-ui-bundle.js"></script>
<script src="/audit/docs/assets/init.js"></script></body></html>`;

/**
 * `/` and `/docs` for a person with a browser: `/` opens the audit log, `/docs` the API's
 * Swagger UI. The UI lives under /audit/docs so that the audit page's sign-in (and its
 * session cookie, scoped to /audit) covers it: an anonymous browser gets the sign-in form.
 */
@ApiExcludeController()
@Controller()
export class DocsController {
  constructor(private readonly holder: OpenApiDocument) {}

  @Public()
  @Get()
  root(@Res() res: Response): void {
    res.redirect(302, '/audit');
  }

  @Public()
  @Get('docs')
  docs(@Res() res: Response): void {
    res.redirect(302, '/audit/docs');
  }

  @AllowSessionCookie()
  @Roles('analyst')
  @UseFilters(AuditPageFilter)
  @Get('audit/docs')
  page(@Res() res: Response): void {
    res
      .status(200)
      .setHeader(
        'Content-Security-Policy',
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'",
      )
      .setHeader('Referrer-Policy', 'no-referrer')
      .setHeader('X-Frame-Options', 'DENY')
      .type('text/html; charset=utf-8')
      .send(PAGE);
  }

  @AllowSessionCookie()
  @Roles('analyst')
  @UseFilters(AuditPageFilter)
  @Get('audit/docs/openapi.json')
  document(): object {
    if (!this.holder.document) throw new NotFoundException('OpenAPI document not generated yet');
    return this.holder.document;
  }

  @AllowSessionCookie()
  @Roles('analyst')
  @UseFilters(AuditPageFilter)
  @Get('audit/docs/assets/:file')
  asset(@Param('file') file: string, @Res() res: Response): void {
    if (file === 'init.js') {
      res.type('text/javascript; charset=utf-8').send(INIT_JS);
      return;
    }
    const asset = ASSETS[file];
    if (!asset) throw new NotFoundException('no such file');
    res.type(asset.type).send(readFileSync(assetPath(asset.file)));
  }
}
