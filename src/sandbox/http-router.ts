import type { IncomingMessage, ServerResponse } from 'node:http';
import { SandboxError, badRequest } from './sandbox.error';
import type { Principal } from './token-store';

/** Body limit for JSON and form requests; uploads never go through these readers. */
const MAX_SMALL_BODY_BYTES = 1024 * 1024;

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

export interface RequestContext {
  req: IncomingMessage;
  res: ServerResponse;
  method: string;
  /** Path below the /v1 prefix, e.g. `/new-order`. */
  path: string;
  query: URLSearchParams;
  ip: string;
}

export interface RouteDoc {
  summary: string;
  permission: 'none' | 'token' | 'read' | 'write';
  query?: { name: string; required?: boolean; description?: string; enum?: readonly string[] }[];
  body?: 'json' | 'json-optional' | 'form';
  bodySchema?: Record<string, unknown>;
  responseSchema?: Record<string, unknown>;
  successStatus?: number;
  responseContent?: string;
  legacy?: boolean;
  errors: number[];
}

export interface Route {
  method: HttpMethod;
  path: string;
  doc: RouteDoc;
  /** `principal` is null only for routes whose permission is 'none'. */
  handle: (ctx: RequestContext, principal: Principal) => Promise<void>;
}

/** Exact-path router: the /v1 interface has no path parameters. */
export class Router {
  private readonly routes = new Map<string, Map<string, Route>>();

  add(route: Route): void {
    const byMethod = this.routes.get(route.path) ?? new Map<string, Route>();
    byMethod.set(route.method, route);
    this.routes.set(route.path, byMethod);
  }

  all(): Route[] {
    return [...this.routes.values()].flatMap((m) => [...m.values()]);
  }

  match(method: string, path: string): Route {
    const byMethod = this.routes.get(path);
    if (!byMethod) throw new SandboxError(404, 'not_found', `no operation at ${path}`);
    const route = byMethod.get(method);
    if (!route) {
      throw new SandboxError(
        405,
        'method_not_allowed',
        `${method} is not supported on ${path}`,
        {},
        { Allow: [...byMethod.keys()].join(', ') },
      );
    }
    return route;
  }
}

export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const payload = Buffer.from(JSON.stringify(body));
  res.writeHead(status, {
    ...headers,
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Length': String(payload.length),
  });
  res.end(payload);
}

export function sendDocument(
  res: ServerResponse,
  status: number,
  contentType: string,
  body: Buffer,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, {
    ...headers,
    'Content-Type': contentType,
    'Content-Length': String(body.length),
  });
  res.end(body);
}

export function sendError(res: ServerResponse, err: SandboxError): void {
  sendJson(res, err.status, err.body(), err.headers);
}

function mediaType(req: IncomingMessage): string {
  return (req.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();
}

/** 415 unless the body is of the `expected` media type; the request is drained first. */
function requireMediaType(req: IncomingMessage, expected: string): void {
  const type = mediaType(req);
  if (type !== expected) {
    drain(req);
    throw new SandboxError(
      415,
      'unsupported_media_type',
      `Content-Type must be ${expected}, got "${type || '(none)'}"`,
    );
  }
}

function hasBody(req: IncomingMessage): boolean {
  const len = req.headers['content-length'];
  if (len !== undefined) return Number(len) > 0;
  return req.headers['transfer-encoding'] !== undefined;
}

async function readSmallBody(req: IncomingMessage): Promise<Buffer> {
  const tooLarge = (): SandboxError =>
    new SandboxError(413, 'payload_too_large', `request body over ${MAX_SMALL_BODY_BYTES} bytes`);
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > MAX_SMALL_BODY_BYTES) {
    throw tooLarge();
  }
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of req) {
    total += (chunk as Buffer).length;
    if (total > MAX_SMALL_BODY_BYTES) throw tooLarge();
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

/**
 * Reads a JSON object body. Wrong media type is 415, absent or empty body 400 empty_body,
 * unparsable 400 malformed_json, a non-object 400 bad_request.
 */
export async function readJsonObject(
  ctx: RequestContext,
  optional = false,
): Promise<Record<string, unknown> | null> {
  if (!hasBody(ctx.req)) {
    if (optional) return null;
    throw badRequest('empty_body', 'request body is required (a JSON object)');
  }
  requireMediaType(ctx.req, 'application/json');
  const raw = await readSmallBody(ctx.req);
  if (raw.length === 0) {
    if (optional) return null;
    throw badRequest('empty_body', 'request body is empty; a JSON object is required');
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString('utf8'));
  } catch (err) {
    throw badRequest('malformed_json', `request body is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw badRequest('bad_request', 'request body must be a JSON object');
  }
  return parsed as Record<string, unknown>;
}

/** Reads an application/x-www-form-urlencoded body (OAuth token endpoint). */
export async function readForm(ctx: RequestContext): Promise<URLSearchParams> {
  if (!hasBody(ctx.req))
    throw badRequest('invalid_request', 'form body with grant_type=client_credentials is required');
  requireMediaType(ctx.req, 'application/x-www-form-urlencoded');
  return new URLSearchParams((await readSmallBody(ctx.req)).toString('utf8'));
}

/** Consumes and discards the rest of a request so that the answer can be read by the client. */
export function drain(req: IncomingMessage): void {
  req.resume();
}

/**
 * Answering without the body: what is left of it is dropped as it comes, and the connection
 * closes after the answer. Before, a refused body (a declared 10 GB, an unsigned PUT) was read
 * and dropped to its end, the connection held for as long as the sender went on sending.
 */
export function answerWithoutBody(req: IncomingMessage, res: ServerResponse): void {
  if (!req.complete && !res.headersSent) res.setHeader('Connection', 'close');
  req.resume();
}
