import type { Request } from 'express';
import type { AuthenticatedRequest } from '../auth/bearer-auth.guard';
import { senderOf } from '../auth/sender-identity';
import { AppError } from '../common/app-error';
import { sha256Hex } from '../common/hash';
import type { FhirCaller } from './fhir-operation.shared';
import { ByteBudgetGate } from '../common/byte-budget-gate';
import { readRawBody } from './fhir-http';

/**
 * Who is calling (`src/auth/sender-identity.ts`): a digest of the bearer token. The idempotency
 * of conditional creates is per sender.
 */
export { senderOf };

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

/**
 * The Subscription notification endpoint takes the EHR's token only: with
 * FHIR_SUBSCRIPTION_TOKEN set, another sender token (a RIS's) is 403 before its body is read.
 * It was taken from any sender token: a RIS's token DELETEd `…/ServiceRequest/{id}` and the
 * EHR's order was cancelled, or PUT a ServiceRequest of its own making as the EHR's. Admin
 * passes, as everywhere; unset, any sender token is the EHR's channel (docs/fhir.md).
 */
export function assertSubscriptionChannel(req: Request, subscriptionToken?: string): void {
  if (subscriptionToken === undefined) return;
  if ((req as AuthenticatedRequest).principal?.role !== 'sender') return;
  const token = /^Bearer\s+(\S+)/i.exec(req.headers.authorization ?? '')?.[1] ?? '';
  // digests compared: equal length, no early exit on the secret's first differing character
  if (sha256Hex(token) === sha256Hex(subscriptionToken)) return;
  throw new AppError(
    'forbidden',
    "only the EHR's Subscription token (FHIR_SUBSCRIPTION_TOKEN) may post notifications; this sender token may not",
  );
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
    ...(req.headers['content-encoding'] === undefined
      ? {}
      : { contentEncoding: req.headers['content-encoding'] }),
    wants: { format: req.query._format, accept: req.headers.accept },
  };
}

/**
 * This server's FHIR base as answers name it: the configured public base
 * (FHIR_PUBLIC_BASE_URL), else the address and port the connection reached. Never the Host or
 * X-Forwarded-* headers: any sender writes those, and a Location or link built from them sent
 * the EHR wherever the sender chose.
 */
export function fhirBaseOf(req: Request, publicBaseUrl: string | undefined): string {
  if (publicBaseUrl) return publicBaseUrl;
  const socket = req.socket as Request['socket'] & { encrypted?: boolean };
  const address = (socket.localAddress ?? '127.0.0.1').replace(/^::ffff:(?=\d+\.)/i, '');
  const host = address.includes(':') ? `[${address.replace(/%.*$/, '')}]` : address;
  return `${socket.encrypted ? 'https' : 'http'}://${host}:${socket.localPort ?? 80}/fhir`;
}

/** Absolute URL of a path under this server's FHIR base (`fhirBaseOf`). */
export function fhirUrl(base: string, path: string): string {
  return `${base}/${path.replace(/^\//, '')}`;
}

/**
 * Bytes of FHIR bodies parsed, validated and mapped at once in this process (the REST
 * operations and Subscription notifications); a larger body runs alone. As MLLP's
 * MLLP_MAX_INFLIGHT_BYTES bounds HL7: 12 creates of 3.6 MB sent together held /health
 * 1.6-1.9 s, run back to back in one turn of the event loop.
 */
export const FHIR_INFLIGHT_BYTES = 4 * 1024 * 1024;
export const fhirBodies = new ByteBudgetGate(FHIR_INFLIGHT_BYTES);
