import type { Route } from './http-router';

const ERROR_TEXT: Record<number, string> = {
  400: 'malformed request or invalid metadata',
  401: 'missing, expired or invalid token',
  403: 'valid token lacks scope for the resource',
  404: 'unknown order, study UID, batch or upload',
  405: 'method not allowed',
  409: 'conflicts with the order state',
  410: 'version retired',
  413: 'too large',
  415: 'wrong content type',
  429: 'rate limited (Retry-After)',
};

const str = { type: 'string' } as const;
const strOrNull = { type: ['string', 'null'] } as const;
const dateTime = { type: 'string', format: 'date-time' } as const;
const uuid = { type: 'string', format: 'uuid' } as const;
const obj = (
  properties: Record<string, unknown>,
  required = Object.keys(properties),
): Record<string, unknown> => ({
  type: 'object',
  required,
  properties,
});
const arr = (items: unknown): Record<string, unknown> => ({ type: 'array', items });
const urlAndExpiry = obj({ url: { type: 'string', format: 'uri' }, expires_at: dateTime });
const metadataBody = obj({
  order_id: uuid,
  metadata: { type: 'object', additionalProperties: true },
});

/** Success bodies, per "METHOD /path" (docs/upstream-assumptions.md "Operations"). */
const RESPONSES: Record<string, Record<string, unknown>> = {
  'POST /auth/token': obj({
    access_token: str,
    token_type: { const: 'Bearer' },
    expires_in: { const: 3600 },
  }),
  'GET /auth/token': obj({
    access_token: str,
    token_type: { const: 'Bearer' },
    expires_in: { const: 3600 },
  }),
  'GET /test-token': obj({
    valid: { const: true },
    client_id: str,
    organization_id: str,
    scopes: arr(str),
    expires_at: dateTime,
  }),
  'POST /new-order': obj({ order_id: uuid }),
  'GET /new-order': obj({ order_id: uuid }),
  'PATCH /add-metadata': metadataBody,
  'GET /metadata': metadataBody,
  'GET /upload/single-put': urlAndExpiry,
  'GET /upload': urlAndExpiry,
  'POST /upload/multipart/initiate': obj({ upload_id: uuid, order_id: uuid }),
  'POST /upload/multipart/presigned-urls': obj({
    upload_id: uuid,
    urls: arr(
      obj({
        part_number: { type: 'integer', minimum: 1, maximum: 100 },
        url: { type: 'string', format: 'uri' },
      }),
    ),
    expires_at: dateTime,
  }),
  'POST /upload/multipart/complete': obj({ order_id: uuid, status: str }),
  'POST /upload/multipart/abort': obj({ upload_id: uuid, aborted: { const: true } }),
  'GET /status': obj({ order_id: uuid, study_uid: strOrNull, status: str, updated_at: dateTime }),
  'GET /list-orders': obj({
    orders: arr(
      obj({
        order_id: uuid,
        study_uid: strOrNull,
        status: str,
        created_at: dateTime,
        updated_at: dateTime,
        batch_id: { type: ['string', 'null'] },
      }),
    ),
  }),
  'GET /qc-report': obj({ order_id: uuid, round: { enum: ['original', 'corrected'] } }, [
    'order_id',
    'round',
  ]),
  'PATCH /qc-bypass': obj({ order_id: uuid, bypass_requested: { type: 'boolean' } }),
  'PATCH /cancel-order': obj({ order_id: uuid, status: { const: 'CANCELLED' } }),
  'POST /new-batch': obj({ batch_id: uuid }),
  'PATCH /associate-order-to-batch': obj({ order_id: uuid, batch_id: uuid }),
  'GET /products': obj({
    products: arr(obj({ id: str, name: str, version: str, UDI: strOrNull, fda_desc: strOrNull })),
  }),
  'GET /recent-activity': obj({
    activity: arr(
      obj({ orderId: uuid, statusDesc: str, failureReason: strOrNull, timestamp: dateTime }),
    ),
  }),
  'GET /reports': obj({
    reports: arr(
      obj({
        report_id: uuid,
        order_id: uuid,
        study_uid: strOrNull,
        status: str,
        report_types: arr(str),
        created_at: dateTime,
      }),
    ),
  }),
  'POST /reports': obj({ acknowledged: { type: 'integer' } }),
  'POST /agent/heartbeat': obj({
    pending_qc_bypass_requests: arr(
      obj({ order_id: uuid, reason: strOrNull, requested_at: dateTime }),
    ),
  }),
  'POST /agent/reports': obj({
    accepted: { type: 'integer' },
    rejected: arr(obj({ order_id: {}, reason: str })),
  }),
};

/**
 * OpenAPI 3.1 description of the sandbox, generated from the route table so that it cannot
 * drift from what the sandbox serves. It documents the sandbox's own reading of the contract
 * (docs/upstream-assumptions.md), not the vendor's machine-readable description.
 */
export function buildOpenApi(routes: Route[], serverUrl: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of [...routes].sort((a, b) => a.path.localeCompare(b.path))) {
    const d = r.doc;
    const responses: Record<string, unknown> = {
      [String(d.successStatus ?? 200)]: {
        description: 'success',
        content:
          d.responseContent === 'document'
            ? {
                'application/pdf': {},
                'image/png': {},
                'application/json': {},
                'application/xml': {},
                'text/plain': {},
                ...(r.path === '/failure-report' ? { 'text/csv': {} } : {}),
              }
            : {
                'application/json': {
                  schema: d.responseSchema ??
                    RESPONSES[`${r.method} ${r.path}`] ?? { type: 'object' },
                },
              },
      },
    };
    for (const status of [...new Set(d.errors)].sort()) {
      responses[String(status)] = {
        description: ERROR_TEXT[status] ?? 'error',
        content: {
          'application/json': {
            schema: {
              $ref:
                status === 410
                  ? '#/components/schemas/RetirementError'
                  : '#/components/schemas/Error',
            },
          },
        },
      };
    }
    const op: Record<string, unknown> = {
      summary: d.summary,
      operationId: `${r.method.toLowerCase()}${r.path.replace(/[^A-Za-z0-9]+(.)?/g, (_m, c: string | undefined) => (c ? c.toUpperCase() : ''))}`,
      security:
        d.permission === 'none'
          ? [{ basicClient: [] }]
          : [{ bearer: d.permission === 'token' ? [] : [d.permission] }],
      parameters: (d.query ?? []).map((q) => ({
        name: q.name,
        in: 'query',
        required: q.required ?? false,
        description: q.description,
        schema: q.enum ? { type: 'string', enum: q.enum } : { type: 'string' },
      })),
      responses,
      ...(d.legacy ? { deprecated: true, 'x-legacy-form': true } : {}),
      'x-permission': d.permission,
    };
    if (d.body === 'form') {
      op.requestBody = {
        required: true,
        content: {
          'application/x-www-form-urlencoded': {
            schema: {
              type: 'object',
              required: ['grant_type'],
              properties: {
                grant_type: { const: 'client_credentials' },
                scope: { type: 'string' },
              },
            },
          },
        },
      };
    } else if (d.body) {
      op.requestBody = {
        required: d.body === 'json',
        content: {
          'application/json': {
            schema: d.bodySchema ?? { type: 'object', additionalProperties: true },
          },
        },
      };
    }
    paths[r.path] = { ...(paths[r.path] ?? {}), [r.method.toLowerCase()]: op };
  }
  paths['/{presigned object URL}'] = {
    put: {
      summary:
        'Presigned object upload (absolute URL from the upload endpoints; no Authorization header)',
      security: [],
      servers: [{ url: serverUrl.replace(/\/v1$/, '/storage') }],
      responses: {
        '200': {
          description: 'stored; ETag header',
          headers: { ETag: { schema: { type: 'string' } } },
        },
        '400': {
          description:
            'empty body, Authorization header present, invalid study (files and reasons listed)',
        },
        '403': { description: 'signature mismatch, expired, or not a PUT' },
        '413': { description: 'over 5 MB (single), over 100 MB (part) or over 10 GB (study)' },
      },
    },
  };
  return {
    openapi: '3.1.0',
    info: {
      title: 'Imaging Analysis Service - sandbox',
      version: '1.0.8-sandbox',
      description:
        'PHI-free twin of the Imaging Analysis Service /v1 interface. See docs/sandbox.md and docs/upstream-assumptions.md.',
    },
    servers: [{ url: serverUrl }],
    paths,
    components: {
      securitySchemes: {
        basicClient: {
          type: 'http',
          scheme: 'basic',
          description: 'client id and secret (token endpoint only)',
        },
        bearer: { type: 'http', scheme: 'bearer' },
      },
      schemas: {
        Error: {
          type: 'object',
          required: ['error', 'message'],
          properties: { error: { type: 'string' }, message: { type: 'string' } },
        },
        RetirementError: {
          type: 'object',
          required: ['error', 'migration_guide'],
          properties: { error: { type: 'string' }, migration_guide: { type: 'string' } },
        },
      },
    },
  };
}
