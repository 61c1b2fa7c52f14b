import type { Router } from './http-router';
import { registerAgentRoutes } from './agent.routes';
import { registerAuthRoutes } from './auth.routes';
import { registerOrderRoutes } from './order.routes';
import { registerReportRoutes } from './report.routes';
import type { SandboxServices } from './sandbox-services';
import { registerUploadRoutes } from './upload.routes';

/** Every operation of the /v1 interface, current and legacy forms. */
export function registerApiRoutes(router: Router, svc: SandboxServices): void {
  registerAuthRoutes(router, svc);
  registerOrderRoutes(router, svc);
  registerUploadRoutes(router, svc);
  registerReportRoutes(router, svc);
  registerAgentRoutes(router, svc);
}
