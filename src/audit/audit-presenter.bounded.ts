import type { OutboxRow } from './audit-query.service';
import { RAW_VIEW_LIMITS, type RawCut, type RawView } from './audit-presenter.raw';
import type { PeerAnswerView } from './audit-presenter';

/**
 * How much of each body (payload, document as sent, peer answer) one outbound document shows
 * in a list: the order view, an order's outbound pages, the dead letters. An outbound document
 * may be a 30 MB DiagnosticReport; its exchange texts are kept up to 256 KiB each. Before, a
 * list drew each whole, four times over (payload, exchange, document and answer views): an
 * order of 2,000 ORUs of 3 KB was a 54 MB answer. The whole document is one request away
 * (`fullPath`), bounded by WHOLE_BODY_CHARACTERS a body.
 */
export const LIST_BODY_CHARACTERS = 16 * 1024;
/** A body of one outbound document viewed alone: the raw views' bound (RAW_VIEW_LIMITS). */
export const WHOLE_BODY_CHARACTERS = RAW_VIEW_LIMITS.characters;

export type OutboundView = OutboxRow & { document?: RawView; peerAnswer?: PeerAnswerView };

/** The first characters of a text up to `max`, never ending between a surrogate pair's halves. */
function headOf(text: string, max: number): string {
  if (text.length <= max) return text;
  const end = /[\uD800-\uDBFF]/.test(text[max - 1] ?? '') ? max - 1 : max;
  return text.slice(0, end);
}

function textCut(shown: number, total: number, segments?: [number, number]): RawCut {
  return {
    shownSegments: segments?.[0] ?? 0,
    totalSegments: segments?.[1] ?? 0,
    shownCharacters: shown,
    totalCharacters: total,
  };
}

/**
 * A view (already masked) cut to `max` characters: an HL7 view between segments (a first
 * segment longer than `max` as text), JSON and text as their head. Unchanged when it fits.
 */
export function cutView(view: RawView, max: number): RawView {
  if (view.text.length <= max) return view;
  const total = (view.format !== 'json' && view.cut?.totalCharacters) || view.text.length;
  if (view.format === 'hl7') {
    const lines = view.text.split('\n');
    let kept = 0;
    let characters = 0;
    while (kept < lines.length && characters + lines[kept]!.length + 1 <= max) {
      characters += lines[kept]!.length + 1;
      kept += 1;
    }
    const segments: [number, number] = [kept, view.cut?.totalSegments ?? view.segments.length];
    if (kept > 0) {
      const text = lines.slice(0, kept).join('\n');
      return {
        ...view,
        segments: view.segments.slice(0, kept),
        text,
        cut: textCut(text.length, total, segments),
      };
    }
    const text = headOf(view.text, max);
    return { format: 'text', text, cut: textCut(text.length, total, segments) };
  }
  const text = headOf(view.text, max);
  return { format: 'text', text, cut: textCut(text.length, total) };
}

/** One side of an exchange (`{contentType, text, status?}`) with its text cut to `max`. */
function cutSide(side: unknown, max: number): { side: unknown; cut: boolean } {
  if (side === null || typeof side !== 'object') return { side, cut: false };
  const s = side as { text?: unknown };
  if (typeof s.text !== 'string' || s.text.length <= max) return { side, cut: false };
  const text = headOf(s.text, max);
  return { side: { ...s, text, cut: textCut(text.length, s.text.length) }, cut: true };
}

/**
 * An outbound document (masked already, unless revealed) with every body cut to `max`
 * characters: `bodiesCut` and `fullPath` (the document alone) when any was.
 */
export function boundedOutbound<T extends OutboundView>(
  row: T,
  max: number,
  fullPath?: string,
): T & { bodiesCut?: true; fullPath?: string } {
  let cut = false;
  const out: T & { bodiesCut?: true; fullPath?: string } = { ...row };
  const payload = JSON.stringify(row.payload) ?? 'null';
  if (payload.length > max) {
    const head = headOf(payload, max);
    out.payload = { cut: textCut(head.length, payload.length), head };
    cut = true;
  }
  if (row.lastExchange) {
    const exchange: Record<string, unknown> = { ...row.lastExchange };
    for (const key of ['sent', 'answer'] as const) {
      if (!(key in exchange)) continue;
      const side = cutSide(exchange[key], max);
      exchange[key] = side.side;
      cut ||= side.cut;
    }
    out.lastExchange = exchange;
  }
  if (row.document) {
    out.document = cutView(row.document, max);
    cut ||= out.document !== row.document;
  }
  if (row.peerAnswer?.view) {
    const view = cutView(row.peerAnswer.view, max);
    if (view !== row.peerAnswer.view) {
      out.peerAnswer = { ...row.peerAnswer, view };
      cut = true;
    }
  }
  if (cut) {
    out.bodiesCut = true;
    if (fullPath) out.fullPath = fullPath;
  }
  return out;
}
