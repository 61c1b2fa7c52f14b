import type { Request } from 'express';
import type { AuthenticatedRequest } from '../auth/bearer-auth.guard';
import { sha256Hex } from '../common/hash';
import type { FhirCaller } from './fhir-operation.shared';
import { readRawBody } from './fhir-http';

/**
 * Who is calling, without the secret: our credentials carry a role, not a name, so a client
 * is known by a short digest of its bearer token (stable while the token is; never
 * reversible). The idempotency of conditional creates is per sender.
 */
export function senderOf(req: Request): string {
  const token = /^Bearer\s+(\S+)/i.exec(req.headers.authorization ?? '')?.[1] ?? '';
  return `fhir-client:${sha256Hex(token).slice(0, 12)}`;
}

/**
 * What a `sender` token may read (least privilege, issue #15): the orders it submitted, and
 * those of the EHR's Subscription channel when it is that channel's token. Undefined for
 * admin, who reads everything.
 */
export interface SenderRestriction {
  own: string;
  ehrChannel: boolean;
}

export function restrictionOf(
  req: Request,
  subscriptionToken?: string,
): SenderRestriction | undefined {
  if ((req as AuthenticatedRequest).principal?.role !== 'sender') return undefined;
  const token = /^Bearer\s+(\S+)/i.exec(req.headers.authorization ?? '')?.[1] ?? '';
  return {
    own: senderOf(req),
    ehrChannel: subscriptionToken === undefined || token === subscriptionToken,
  };
}

/** Whether an order or resource submitted by `sender` is visible under the restriction. */
export function mayRead(
  restriction: SenderRestriction | undefined,
  sender: string | null,
): boolean {
  if (!restriction) return true;
  if (sender === restriction.own) return true;
  return restriction.ehrChannel && sender !== null && sender.startsWith('fhir-ehr:');
}

/**
 * The caller and its body. `keepHead`: a body over `maxBodyBytes` does not throw; its head is
 * the caller's raw and `tooLarge` is set, for an operation that keeps refusals (`keeping`
 * answers it 413 and keeps it).
 */
export async function callerOf(
  req: Request,
  maxBodyBytes: number,
  options: { keepHead?: boolean } = {},
): Promise<FhirCaller> {
  const body = await readRawBody(req, maxBodyBytes, options);
  return {
    ...(body.tooLarge !== undefined ? { tooLarge: body.tooLarge } : {}),
    ...(body.stalled !== undefined ? { stalled: body.stalled } : {}),
    sender: senderOf(req),
    // Changes: only to what this sender submitted itself (the EHR channel's come by notification).
    restrictedTo: restrictionOf(req)?.own,
    actor: `fhir-client (${(req as AuthenticatedRequest).principal?.role ?? 'unknown role'})`,
    remoteAddress: req.socket.remoteAddress ?? null,
    raw: body.bytes,
    contentType: body.contentType,
    wants: { format: req.query._format, accept: req.headers.accept },
  };
}

/** Absolute URL of a path under /fhir on this server, as the client reached it. */
export function fhirUrl(req: Request, path: string): string {
  return `${serverBase(req)}/fhir/${path.replace(/^\//, '')}`;
}

/**
 * This server as the client reached it: scheme and Host, or without a Host (HTTP/1.0 may send
 * none) the address and port the connection came to. It was `http://undefined`.
 */
export function serverBase(req: Request): string {
  const host = req.get('host');
  if (host) return `${req.protocol}://${host}`;
  const address = req.socket.localAddress ?? '127.0.0.1';
  const shown = address.includes(':') ? `[${address}]` : address;
  return `${req.protocol}://${shown}:${req.socket.localPort ?? ''}`;
}
