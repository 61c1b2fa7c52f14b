import { asSent, EMPTY, ofValue, type LineageLine, type TransformFn } from './hl7-value.kit';

/** Text as sent: plain strings, OBR-13 free text, NTE notes. */

export const stringTransform: TransformFn = ofValue(asSent);

/** OBR-13 relevant clinical information (free text) as an uncoded reason. */
export const freeTextReason: TransformFn = ofValue((value, source) => ({
  kind: 'value',
  value: [{ display: value }],
  lines: [{ suffix: '[0].display', source, value }],
}));

/** NTE-3 (FT, repeating) of every NTE in the order group, one note per NTE. */
export const nteNotes: TransformFn = (input) => {
  const notes: string[] = [];
  const lines: LineageLine[] = [];
  for (const seg of input.sameId) {
    const parts: string[] = [];
    for (let r = 1; r <= seg.repetitionCount(input.loc.field); r += 1) {
      const v = seg.value(input.loc.field, r);
      if (v !== undefined) parts.push(v);
    }
    if (parts.length === 0) continue;
    const text = parts.join('\n');
    lines.push({
      suffix: `[${notes.length}]`,
      source: seg.locationOf(input.loc.field),
      value: text,
    });
    notes.push(text);
  }
  return notes.length === 0 ? EMPTY : { kind: 'value', value: notes, lines };
};
