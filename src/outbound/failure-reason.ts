import type { DeliveryResult } from './publisher';

/** Error codes of Node and undici that say how a peer was not reached (`ECONNREFUSED`, `UND_ERR_…`). */
const ERROR_CODE = /\b(E[A-Z]{3,20}|UND_ERR_[A-Z_]{3,30}|ERR_[A-Z_]{3,40})\b/;
const TIMEOUT = /\b(TimeoutError|AbortError|timed? ?out)\b/i;
/** An HL7 v2 acknowledgment code that is not an accept (HL7 v2.5.1 table 0008). */
const REFUSING_ACK = new Set(['AE', 'AR', 'CE', 'CR']);

/**
 * A short reason for an attempt that failed, made of fixed words and codes only: the HTTP
 * status, the HL7 ACK code, a socket error code, `timeout`. It is what `/health` (public)
 * shows of a destination's last failure and what groups a destination's dead-letter alerts,
 * so it never carries the answer's free text (a peer's OperationOutcome or MSA-3 may quote
 * the patient; a client error may quote a URL with its token or an address).
 */
export function failureReason(result: Pick<DeliveryResult, 'answer' | 'detail'>): string {
  const detail = result.detail ?? {};
  const status = [detail.status, detail.httpStatus].find(
    (v): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 100 && v <= 599,
  );
  if (status !== undefined) return `HTTP ${status}`;
  const ack = detail.ackCode;
  if (typeof ack === 'string' && REFUSING_ACK.has(ack)) return `ACK ${ack}`;
  if (typeof ack === 'string' || ack === null) return 'ACK not understood';
  for (const text of [detail.code, detail.error, result.answer]) {
    if (typeof text !== 'string') continue;
    const code = ERROR_CODE.exec(text)?.[1];
    if (code) return code;
    if (TIMEOUT.test(text)) return 'timeout';
  }
  if (/\bnot HL7\b/.test(result.answer)) return 'reply not HL7';
  if (/\bnot sent\b/.test(result.answer)) return 'refused before sending';
  return 'delivery failed';
}
