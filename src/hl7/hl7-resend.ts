import { parseHl7 } from './hl7-message';

/**
 * Fields that only say *when this copy was written*, which a sender regenerates when it resends
 * (v2.5.1): MSH-7 (date/time of message, §2.14.9.7; engines resending from their queue stamp it
 * anew), ORC-9 (date/time of transaction, §4.5.1.9; a RIS that rebuilds the message from its
 * database stamps the transaction again) and EVN-2 (recorded date/time, §3.4.1.2). Every other
 * field must be the same: another patient, procedure, accession, order number, order control,
 * requested time or priority is a different message under a reused control ID.
 */
const TRANSMISSION_TIMES: Readonly<Record<string, readonly number[]>> = {
  MSH: [7],
  ORC: [9],
  EVN: [2],
};

/**
 * Whether `resent` is a resend of `original` (the same sender and MSH-10 already accepted):
 * the same segments, field for field, in the characters they decode to, but for the
 * TRANSMISSION_TIMES. Segment separators (CR, LF, CRLF) and a BOM do not count.
 */
export function isResendOf(resent: Buffer, original: Buffer): boolean {
  if (resent.equals(original)) return true;
  try {
    return sameContent(contentOf(resent), contentOf(original));
  } catch {
    return false;
  }
}

function contentOf(raw: Buffer): string[] {
  const message = parseHl7(raw);
  const d = message.delimiters;
  return message.segments.map((segment) => {
    // fields[n] is field n of every segment (MSH: fields[1] is MSH-1, the field separator).
    const times = TRANSMISSION_TIMES[segment.id] ?? [];
    return segment.fields.map((f, n) => (times.includes(n) ? '' : f)).join(d.field);
  });
}

function sameContent(a: string[], b: string[]): boolean {
  return a.length === b.length && a.every((line, i) => line === b[i]);
}
