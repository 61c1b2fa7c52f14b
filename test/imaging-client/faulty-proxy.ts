import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, request } from 'undici';

/**
 * `delayMs`: answer late (after the upstream acted); `holdMs`: forward late (the upstream acts
 * late); `until`: forward when the promise settles (a call held as long as a test needs);
 * `rewrite`: the upstream's answer body replaced by what the function makes of it, and its
 * status by `status` and headers added from `headers` if given (a hostile upstream that
 * otherwise behaves), forwarded when `until` settles if given.
 */
export type ProxyAction =
  | 'pass'
  | 'drop-after'
  | { delayMs: number }
  | { holdMs: number }
  /** Answered by the proxy, never forwarded (an upstream down behind its load balancer). */
  | { reply: number; body: string; headers?: Record<string, string> }
  | { until: Promise<unknown> }
  | {
      rewrite: (body: Buffer) => Buffer | string;
      status?: number;
      headers?: Record<string, string>;
      /** Forward when this settles (a rewritten answer that comes when a test says). */
      until?: Promise<unknown>;
    };

export interface ProxyHit {
  method: string;
  path: string;
  at: number;
  status: number | null;
}

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'transfer-encoding',
  'upgrade',
  'proxy-connection',
]);

/**
 * A real HTTP proxy in front of the sandbox that sees every API request (for counting
 * against the rate limits) and can lose an answer after the upstream acted on it — the
 * ambiguous failure a non-idempotent create must survive.
 */
export async function startFaultyProxy(
  targetBaseUrl: string,
  decide: (method: string, path: string) => ProxyAction = () => 'pass',
): Promise<{ baseUrl: string; hits: ProxyHit[]; close(): Promise<void> }> {
  const target = new URL(targetBaseUrl);
  const hits: ProxyHit[] = [];
  // Its own connection pool, closed with the proxy, so no keep-alive socket outlives a test.
  const agent = new Agent();
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', target.origin);
      const path = url.pathname.slice(target.pathname.length) || '/';
      const hit: ProxyHit = { method: req.method ?? 'GET', path, at: Date.now(), status: null };
      hits.push(hit);
      const action = decide(hit.method, path);
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers)) {
        if (typeof v === 'string' && k !== 'host' && !HOP_BY_HOP.has(k)) headers[k] = v;
      }
      if (typeof action === 'object' && 'reply' in action) {
        hit.status = action.reply;
        res.writeHead(action.reply, { 'content-type': 'application/json', ...action.headers });
        res.end(action.body);
        return;
      }
      const hold = typeof action === 'object' && 'holdMs' in action ? action.holdMs : 0;
      const until = typeof action === 'object' && 'until' in action ? action.until : undefined;
      (until ? until.catch(() => undefined) : new Promise((resolve) => setTimeout(resolve, hold)))
        .then(() =>
          request(new URL(req.url ?? '/', target.origin), {
            method: req.method as 'GET',
            dispatcher: agent,
            headers,
            body: chunks.length ? Buffer.concat(chunks) : undefined,
          }),
        )
        .then(async (answer) => {
          const upstreamBody = Buffer.from(await answer.body.arrayBuffer());
          const body =
            typeof action === 'object' && 'rewrite' in action
              ? Buffer.from(action.rewrite(upstreamBody))
              : upstreamBody;
          hit.status = answer.statusCode;
          if (action === 'drop-after') {
            req.socket.destroy();
            return;
          }
          if (typeof action === 'object' && 'delayMs' in action) {
            await new Promise((r) => setTimeout(r, action.delayMs));
          }
          const out: Record<string, string | string[]> = {};
          for (const [k, v] of Object.entries(answer.headers)) {
            if (v !== undefined && !HOP_BY_HOP.has(k) && k !== 'content-length') out[k] = v;
          }
          if (res.destroyed) return;
          const status =
            typeof action === 'object' && 'rewrite' in action && action.status
              ? action.status
              : answer.statusCode;
          if (typeof action === 'object' && 'rewrite' in action) Object.assign(out, action.headers);
          res.writeHead(status, out);
          res.end(body);
        })
        .catch(() => req.socket.destroy());
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}${target.pathname}`,
    hits,
    close: async () => {
      await new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      });
      await agent.close();
    },
  };
}
