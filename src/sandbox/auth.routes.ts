import { readForm, sendJson, type RequestContext, type Router } from './http-router';
import { badRequest } from './sandbox.error';
import type { SandboxServices } from './sandbox-services';

/** `/auth/token` (current and legacy forms) and `/test-token` (contract "Authentication"). */
export function registerAuthRoutes(router: Router, svc: SandboxServices): void {
  const { clock, tokens } = svc;
  const issueToken = async (
    ctx: RequestContext,
    grantType: string | null,
    scope: string | null,
  ): Promise<void> => {
    const client = tokens.authenticateClient(ctx.req);
    if (grantType === null || grantType === '')
      throw badRequest('invalid_request', 'grant_type=client_credentials is required');
    if (grantType !== 'client_credentials') {
      throw badRequest(
        'unsupported_grant_type',
        `grant_type "${grantType.slice(0, 40)}" is not supported; only client_credentials (there is no refresh grant)`,
      );
    }
    const t = tokens.issue(client, scope);
    sendJson(
      ctx.res,
      200,
      {
        access_token: t.accessToken,
        token_type: 'Bearer',
        expires_in: t.expiresIn,
        scope: t.scopes.join(' '),
      },
      { 'Cache-Control': 'no-store', Pragma: 'no-cache' },
    );
  };

  router.add({
    method: 'POST',
    path: '/auth/token',
    doc: {
      summary: 'OAuth 2.0 client credentials token',
      permission: 'none',
      body: 'form',
      errors: [400, 401, 415, 410, 429],
    },
    handle: async (ctx) => {
      const form = await readForm(ctx);
      await issueToken(ctx, form.get('grant_type'), form.get('scope'));
    },
  });
  router.add({
    method: 'GET',
    path: '/auth/token',
    doc: {
      summary: 'Legacy token retrieval (query grant_type)',
      permission: 'none',
      legacy: true,
      query: [{ name: 'grant_type', required: true, enum: ['client_credentials'] }],
      errors: [400, 401, 410, 429],
    },
    handle: async (ctx) => issueToken(ctx, ctx.query.get('grant_type'), ctx.query.get('scope')),
  });

  router.add({
    method: 'GET',
    path: '/test-token',
    doc: {
      summary: 'Validates the token; no side effects',
      permission: 'token',
      errors: [401, 410, 429],
    },
    handle: async (ctx, p) => {
      sendJson(ctx.res, 200, {
        valid: true,
        client_id: p.clientId,
        organization_id: p.organizationId,
        role: p.role,
        scopes: p.scopes,
        expires_at: clock.iso(p.expiresAt),
      });
    },
  });
}
