import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Clock } from '../../src/imaging-client/ports';

export interface SeenRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  headers: IncomingMessage['headers'];
  body: Buffer;
}

export type Script = (req: SeenRequest, res: ServerResponse) => unknown;

/**
 * A real HTTP peer on loopback whose answers a test writes by hand, for the cases the
 * sandbox should never produce (wrong JSON, a missing ETag, a 401 on a fresh token…).
 */
export async function startScriptedUpstream(script: Script): Promise<{
  baseUrl: string;
  origin: string;
  seen: SeenRequest[];
  close(): Promise<void>;
}> {
  const seen: SeenRequest[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://x');
      const entry: SeenRequest = {
        method: req.method ?? 'GET',
        path: url.pathname.replace(/^\/v1/, ''),
        query: url.searchParams,
        headers: req.headers,
        body: Buffer.concat(chunks),
      };
      seen.push(entry);
      Promise.resolve(script(entry, res)).catch((error: unknown) => {
        res.statusCode = 599;
        res.end(String(error));
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const origin = `http://127.0.0.1:${port}`;
  return {
    baseUrl: `${origin}/v1`,
    origin,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export function json(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

export function tokenAnswer(res: ServerResponse, token = 'tok-1', expiresIn = 3600): void {
  json(res, 200, { access_token: token, token_type: 'Bearer', expires_in: expiresIn });
}

/** Real time, but sleeps are recorded and skipped (time jumps forward instead). */
export class JumpingClock implements Clock {
  offset = 0;
  readonly sleeps: number[] = [];
  now(): number {
    return Date.now() + this.offset;
  }
  async sleep(ms: number): Promise<void> {
    this.sleeps.push(ms);
    this.offset += ms;
    await new Promise((resolve) => setImmediate(resolve));
  }
}
