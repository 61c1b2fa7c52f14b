import { Controller, Get, Injectable, NotFoundException } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';

/** Holds the OpenAPI document, generated once the application's routes are known. */
@Injectable()
export class OpenApiDocument {
  document?: object;
}

@ApiExcludeController()
@Controller()
export class OpenApiController {
  constructor(private readonly holder: OpenApiDocument) {}

  @Get('openapi.json')
  get(): object {
    if (!this.holder.document) throw new NotFoundException('OpenAPI document not generated yet');
    return this.holder.document;
  }
}
