import { parseHl7 } from './hl7-message';

/**
 * Whether `resent` is a resend of `original` (the same sender and MSH-10 already accepted):
 * the same segments, field for field, in the characters they decode to. MSH-7 (the time the
 * message was sent) may differ: engines that resend from their queue stamp it anew. Segment
 * separators (CR, LF, CRLF) and a BOM do not count. Anything else — another ORC-1, another
 * patient, another order — is a different message under a reused control ID.
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
  return message.segments.map((segment, i) =>
    i === 0
      ? segment.fields.map((f, n) => (n === 7 ? '' : f)).join(d.field)
      : segment.fields.join(d.field),
  );
}

function sameContent(a: string[], b: string[]): boolean {
  return a.length === b.length && a.every((line, i) => line === b[i]);
}
