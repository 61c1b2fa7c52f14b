import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { isIP, type Socket } from 'node:net';
import { bodyStallReason, markBodyStalled, silentFor } from './body-stall';
import { PROBLEM_JSON, problemBody } from './problem-body';

export interface HttpConnectionLimits {
  /** Connections held at once (HTTP_MAX_CONNECTIONS). */
  maxConnections: number;
  /**
   * Connections one peer address holds at once, and requests one client has under way
   * (HTTP_MAX_CONNECTIONS_PER_CLIENT). `/health` is not counted. Absent: no per-client bound
   * (the sandbox, whose clients are the adapter and local tools).
   */
  maxPerClient?: number;
  /**
   * Peers (reverse proxies, HTTP_TRUSTED_PROXIES) whose X-Forwarded-For names the client. Their
   * connections are bounded by `maxConnections` only; their requests per forwarded client.
   */
  trustedProxies?: readonly string[];
  /**
   * A connection with no request under way (nothing sent yet, headers not complete, or between
   * keep-alive requests) is closed after this long (HTTP_IDLE_TIMEOUT_SECONDS).
   */
  idleTimeoutMs: number;
  /**
   * A request whose body is still due and gets no byte for this long has stalled
   * (HTTP_BODY_STALL_SECONDS): its route answers 408 and the connection closes. A body that keeps
   * moving, however slowly and however large, is not cut. Absent: bodies are not watched here,
   * and Node's own whole-request timeout stays as the server has it (the sandbox).
   */
  bodyStallMs?: number;
  /**
   * A request body must average at least this many bytes a second once `bodyStallMs` has passed
   * (HTTP_BODY_MIN_BYTES_PER_SECOND), else its route answers 408 and the connection closes: a
   * body dripping a byte just under every `bodyStallMs` never stalls. Time while received bytes
   * wait for the route to read them is not counted against the client. Only with `bodyStallMs`.
   */
  bodyMinBytesPerSecond?: number;
  /** Told of every connection or request the guard closes or refuses, with why (for metrics). */
  onClose?: (reason: GuardCloseReason) => void;
  /** How often the connections are looked at (tests use less than a second). */
  sweepMs?: number;
}

/** Why the guard closed a connection or refused a request. */
export type GuardCloseReason =
  'limit' | 'evicted' | 'per-client' | 'pipelined' | 'idle' | 'stalled' | 'slow';

interface Tracked {
  socket: Socket;
  /** The peer's address (IPv4-mapped IPv6 written as IPv4). */
  address: string;
  /** Requests whose headers are in and whose answer has not finished. */
  inFlight: number;
  /** Since when the connection has had no request under way (open or last answer finished). */
  idleSince: number;
  /** The request whose body is being received (the parser reads one at a time). */
  receiving?: IncomingMessage;
  /** socket.bytesRead when last looked at, and when it last moved. */
  bytesRead: number;
  movedAt: number;
  /** socket.bytesRead when the receiving request's headers were in. */
  bodyStartBytes: number;
  /** Time the receiving request's body has been the client's to send (ms), and when last added to. */
  bodyClockMs: number;
  bodyClockAt: number;
}

/**
 * Requests one connection may have under way at once (HTTP/1.1 pipelining). Before: 50
 * connections each pipelining 5,000 GET /fhir/metadata and reading nothing took the process
 * from 0.48 to 1.26 GB and held /health for 36.7 s. Clients that pipeline at all send a few.
 */
const MAX_PIPELINED = 16;

/** X-Forwarded-For entries looked at, from the right (the proxies nearest us append last). */
const MAX_FORWARDED_HOPS = 16;

/** How long a client refused for having too many requests under way is asked to wait. */
const PER_CLIENT_RETRY_AFTER_SECONDS = 1;

/** A 408 written by hand: no request object exists while headers are still coming. */
const HEADERS_TIMEOUT_ANSWER =
  'HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n';

/**
 * Bounds what idle and slow HTTP clients can hold (docs/security.md). Node keeps a connection
 * that never sends a byte open for ever, and counts no connections: 20,000 idle sockets nearly
 * exhausted the process's file handles. Here:
 *
 * - at most `maxConnections`; at the limit the connection idle the longest (no request under
 *   way: a silent socket, a slowloris one still sending its headers, a keep-alive one between
 *   requests) gives way to the new one, so `/health` and real senders still get in while idle
 *   or slowloris clients fill the table. Only when every connection has a request under way
 *   is the new one closed at once;
 * - one peer address holds at most `maxPerClient` connections: at that bound its own idlest
 *   connection gives way to its new one, and when all of them have a request under way the new
 *   one is closed at once. Before, one address with a body still due on each of 1,000
 *   connections held the whole table, /health included. A trusted reverse proxy's connections
 *   are bounded by `maxConnections` only;
 * - one client has at most `maxPerClient` requests under way (its address, or behind a trusted
 *   proxy the X-Forwarded-For client): more are answered 429 and closed. `/health` is never
 *   counted nor refused here;
 * - a connection with more than MAX_PIPELINED requests under way (pipelined) is closed;
 * - a connection with no request under way for `idleTimeoutMs` is closed (a 408 first when it
 *   had started sending headers).
 *
 * The sandbox (sandbox.ts) uses it too, with neither `maxPerClient` nor `bodyStallMs`: there only
 * the total bound, the idle timeout and the pipelining bound apply.
 *
 * - a request whose body is still due and gets no byte for `bodyStallMs` is marked stalled and its
 *   stream ended (body-stall.ts): its route answers 408 and the connection closes. Node's own
 *   whole-request timeout (300 s) is off: it cut a large body moving steadily over a slow link.
 */
export class HttpConnectionGuard {
  /** In order of `idleSince`: a connection going idle is moved to the end. */
  private readonly connections = new Map<Socket, Tracked>();
  /** Each peer address's connections. */
  private readonly byAddress = new Map<string, Set<Tracked>>();
  /** Requests under way per client (address, or X-Forwarded-For behind a trusted proxy). */
  private readonly requestsByClient = new Map<string, number>();
  private readonly trusted: ReadonlySet<string>;
  private readonly timer: NodeJS.Timeout;
  evicted = 0;
  refused = 0;
  refusedPerClient = 0;
  timedOut = 0;
  stalled = 0;
  slow = 0;
  pipelineRefused = 0;

  constructor(
    private readonly server: Server,
    private readonly limits: HttpConnectionLimits,
  ) {
    this.trusted = new Set((limits.trustedProxies ?? []).map(plainAddress));
    server.on('connection', (socket: Socket) => this.onConnection(socket));
    // In front of the application's own handler, so that a request refused here never reaches it.
    const handlers = server.listeners('request') as Array<
      (req: IncomingMessage, res: ServerResponse) => void
    >;
    server.removeAllListeners('request');
    server.on('request', (req: IncomingMessage, res: ServerResponse) => {
      if (!this.onRequest(req, res)) return;
      for (const handler of handlers) handler.call(server, req, res);
    });
    // Bodies are bounded by their stall instead (checkBody): Node's whole-request timeout cut a
    // large STOW-RS push moving steadily over a slow link at 300 s, and (checked every 30 s)
    // did not bound a dripping one any better.
    if (limits.bodyStallMs !== undefined) server.requestTimeout = 0;
    // A kept-alive connection lasts as long as any idle one here, and every answer's
    // Keep-Alive header says so. Node's own 5 s (closed at 6 s) reset a 6 MB STOW-RS push sent
    // on a connection idle 7.6 s, whatever the idle timeout said; the sandbox promised 65 s
    // while it closed idle connections after its own.
    server.keepAliveTimeout = limits.idleTimeoutMs;
    this.timer = setInterval(() => this.sweep(), limits.sweepMs ?? 1_000);
    this.timer.unref();
    server.once('close', () => this.stop());
  }

  get size(): number {
    return this.connections.size;
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private onConnection(socket: Socket): void {
    const address = plainAddress(socket.remoteAddress ?? '');
    const own = this.byAddress.get(address);
    if (
      this.limits.maxPerClient !== undefined &&
      !this.trusted.has(address) &&
      own !== undefined &&
      own.size >= this.limits.maxPerClient &&
      !this.evictIdlest(own.values())
    ) {
      this.refusedPerClient += 1;
      this.limits.onClose?.('per-client');
      socket.destroy();
      return;
    }
    if (
      this.connections.size >= this.limits.maxConnections &&
      !this.evictIdlest(this.connections.values())
    ) {
      this.refused += 1;
      this.limits.onClose?.('limit');
      socket.destroy();
      return;
    }
    const now = Date.now();
    const tracked: Tracked = {
      socket,
      address,
      inFlight: 0,
      idleSince: now,
      bytesRead: 0,
      movedAt: now,
      bodyStartBytes: 0,
      bodyClockMs: 0,
      bodyClockAt: now,
    };
    this.connections.set(socket, tracked);
    const set = own ?? new Set<Tracked>();
    set.add(tracked);
    this.byAddress.set(address, set);
    socket.once('close', () => this.forget(tracked));
  }

  private forget(tracked: Tracked): void {
    this.connections.delete(tracked.socket);
    const own = this.byAddress.get(tracked.address);
    if (!own?.delete(tracked) || own.size > 0) return;
    this.byAddress.delete(tracked.address);
  }

  /** The client a request counts against: its peer, or behind a trusted proxy the forwarded one. */
  private clientOf(req: IncomingMessage, peer: string): string {
    if (!this.trusted.has(peer)) return peer;
    const header = req.headers['x-forwarded-for'];
    const hops = (Array.isArray(header) ? header.join(',') : (header ?? ''))
      .split(',')
      .slice(-MAX_FORWARDED_HOPS)
      .map((h) => plainAddress(withoutPort(h.trim())));
    // From the right: the first hop that is no proxy of ours is the client; one that is no
    // address at all (a forged or garbled entry) ends the walk with the last proxy as client.
    for (let i = hops.length - 1; i >= 0; i -= 1) {
      const hop = hops[i]!;
      if (isIP(hop) === 0) break;
      if (!this.trusted.has(hop)) return hop;
      peer = hop;
    }
    return peer;
  }

  /** Counts the request against its client; false (and a 429 sent) when the client has too many. */
  private admitForClient(req: IncomingMessage, res: ServerResponse, tracked: Tracked): boolean {
    const bound = this.limits.maxPerClient;
    if (bound === undefined || isHealthCheck(req)) return true;
    const client = this.clientOf(req, tracked.address);
    const underWay = this.requestsByClient.get(client) ?? 0;
    if (underWay >= bound) {
      this.refusedPerClient += 1;
      this.limits.onClose?.('per-client');
      refuseTooMany(req, res, bound);
      return false;
    }
    this.requestsByClient.set(client, underWay + 1);
    let done = false;
    const release = () => {
      if (done) return;
      done = true;
      const left = (this.requestsByClient.get(client) ?? 1) - 1;
      if (left > 0) this.requestsByClient.set(client, left);
      else this.requestsByClient.delete(client);
    };
    res.once('finish', release);
    res.once('close', release);
    return true;
  }

  /** False when the request is refused (its connection closed). */
  private onRequest(req: IncomingMessage, res: ServerResponse): boolean {
    // What the parser still reads from a connection closed here goes no further.
    if (req.socket.destroyed) return false;
    const tracked = this.connections.get(req.socket);
    if (!tracked) return true;
    if (tracked.inFlight >= MAX_PIPELINED) {
      // Answers to pipelined requests go out in order and are held until the client reads
      // them: one that pipelines thousands and reads nothing had every answer built and held.
      this.pipelineRefused += 1;
      this.limits.onClose?.('pipelined');
      req.socket.destroy();
      return false;
    }
    if (!this.admitForClient(req, res, tracked)) return false;
    tracked.inFlight += 1;
    if (!req.complete && this.limits.bodyStallMs !== undefined) {
      tracked.receiving = req;
      tracked.movedAt = Date.now();
      tracked.bodyStartBytes = tracked.socket.bytesRead;
      tracked.bytesRead = tracked.bodyStartBytes;
      tracked.bodyClockMs = 0;
      tracked.bodyClockAt = tracked.movedAt;
    }
    let done = false;
    const finished = () => {
      if (done) return;
      done = true;
      tracked.inFlight -= 1;
      if (tracked.inFlight === 0 && this.connections.has(tracked.socket)) {
        tracked.idleSince = Date.now();
        // Re-inserted: the map stays ordered by idleSince.
        this.connections.delete(tracked.socket);
        this.connections.set(tracked.socket, tracked);
      }
    };
    res.once('finish', finished);
    res.once('close', finished);
    return true;
  }

  /**
   * Closes the connection idle the longest among `candidates`; false when every one has a
   * request under way.
   */
  private evictIdlest(candidates: Iterable<Tracked>): boolean {
    let idlest: Tracked | undefined;
    for (const tracked of candidates) {
      if (tracked.inFlight > 0) continue;
      if (idlest === undefined || tracked.idleSince < idlest.idleSince) idlest = tracked;
    }
    if (idlest === undefined) return false;
    this.evicted += 1;
    this.limits.onClose?.('evicted');
    this.forget(idlest);
    idlest.socket.destroy();
    return true;
  }

  private sweep(): void {
    const now = Date.now();
    const cutoff = now - this.limits.idleTimeoutMs;
    for (const tracked of [...this.connections.values()]) {
      if (tracked.receiving) this.checkBody(tracked, now);
      if (tracked.inFlight > 0 || tracked.idleSince > cutoff) continue;
      this.timedOut += 1;
      this.limits.onClose?.('idle');
      this.forget(tracked);
      const socket = tracked.socket;
      // Headers started (bytes read since the last answer) but never finished: say why.
      if (socket.bytesRead > 0 && socket.writable && !hasAnswered(socket)) {
        socket.end(HEADERS_TIMEOUT_ANSWER);
        setTimeout(() => socket.destroy(), 1_000).unref();
      } else {
        socket.destroy();
      }
    }
  }

  /**
   * Past its first `bodyStallMs`, a body must have averaged `bodyMinBytesPerSecond` over the
   * time it was the client's to send (the first `bodyStallMs` are grace: a sender may pause
   * before its body, as it may within it).
   */
  private tooSlow(tracked: Tracked, read: number, stallMs: number): boolean {
    const minRate = this.limits.bodyMinBytesPerSecond;
    const owedMs = tracked.bodyClockMs - stallMs;
    if (minRate === undefined || owedMs <= 0) return false;
    return read - tracked.bodyStartBytes < (owedMs / 1000) * minRate;
  }

  /**
   * A body counts as moving while bytes arrive on the socket, or while bytes already received
   * wait for the route to read them (the route's pace, e.g. the disk, is not the client's).
   */
  private checkBody(tracked: Tracked, now: number): void {
    const req = tracked.receiving!;
    const stallMs = this.limits.bodyStallMs;
    if (
      stallMs === undefined ||
      req.complete ||
      req.destroyed ||
      bodyStallReason(req) !== undefined
    ) {
      tracked.receiving = undefined;
      return;
    }
    const read = tracked.socket.bytesRead;
    const held = req.readableLength > 0;
    if (!held) tracked.bodyClockMs += now - tracked.bodyClockAt;
    tracked.bodyClockAt = now;
    if (read !== tracked.bytesRead || held) {
      tracked.bytesRead = read;
      tracked.movedAt = now;
    } else if (now - tracked.movedAt >= stallMs) {
      this.stalled += 1;
      this.limits.onClose?.('stalled');
      tracked.receiving = undefined;
      markBodyStalled(req, silentFor(Math.round(stallMs / 1000)));
      return;
    }
    if (!this.tooSlow(tracked, read, stallMs)) return;
    this.slow += 1;
    this.limits.onClose?.('slow');
    tracked.receiving = undefined;
    markBodyStalled(
      req,
      `arrived too slowly: under ${this.limits.bodyMinBytesPerSecond ?? 0} bytes/s on average over ${Math.round(tracked.bodyClockMs / 1000)} s (HTTP_BODY_MIN_BYTES_PER_SECOND)`,
    );
  }
}

/** `::ffff:10.0.0.1` (an IPv4 peer on a dual-stack socket) as `10.0.0.1`. */
function plainAddress(address: string): string {
  return address.startsWith('::ffff:') && isIP(address.slice(7)) === 4 ? address.slice(7) : address;
}

/**
 * An X-Forwarded-For entry without its port: `10.0.0.1:4711` (Azure Application Gateway) and
 * `[2001:db8::1]:4711` (RFC 7239 form) name 10.0.0.1 and 2001:db8::1. Before, such entries were
 * no address, and every client behind the proxy counted as the proxy itself.
 */
function withoutPort(hop: string): string {
  const bracketed = /^\[([0-9A-Fa-f:.]+)\](?::\d{1,5})?$/.exec(hop);
  if (bracketed) return bracketed[1]!;
  const v4 = /^(\d{1,3}(?:\.\d{1,3}){3}):\d{1,5}$/.exec(hop);
  return v4 ? v4[1]! : hop;
}

function isHealthCheck(req: IncomingMessage): boolean {
  return (
    (req.method === 'GET' || req.method === 'HEAD') && /^\/health\/?(\?|$)/i.test(req.url ?? '')
  );
}

/** 429 with Retry-After (RFC 6585 §4), in the front door's form; the connection closes. */
function refuseTooMany(req: IncomingMessage, res: ServerResponse, bound: number): void {
  const detail = `this client has ${bound} requests under way already (HTTP_MAX_CONNECTIONS_PER_CLIENT); retry once one has been answered`;
  const fhir = /^\/fhir(\/|\?|$)/i.test(req.url ?? '');
  const body = JSON.stringify(
    fhir
      ? {
          resourceType: 'OperationOutcome',
          issue: [{ severity: 'error', code: 'throttled', diagnostics: detail }],
        }
      : problemBody({ originalUrl: req.url ?? '/' }, 429, 'too_many_requests', detail),
  );
  res.shouldKeepAlive = false;
  res.writeHead(429, {
    'Content-Type': fhir ? 'application/fhir+json; charset=utf-8' : PROBLEM_JSON,
    'Content-Length': Buffer.byteLength(body),
    'Retry-After': String(PER_CLIENT_RETRY_AFTER_SECONDS),
    'Cache-Control': 'no-store',
    'X-Content-Type-Options': 'nosniff',
    Connection: 'close',
  });
  // Its body is not read: Connection: close ends the connection once the answer is out.
  res.end(body);
}

/** True once the socket has written anything (an earlier answer on a keep-alive connection). */
function hasAnswered(socket: Socket): boolean {
  return socket.bytesWritten > 0;
}
