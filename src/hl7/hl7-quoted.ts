/**
 * A code as the sender wrote it, for the text of a refusal or warning we answer with (ERR-8,
 * MSA-3): its first 20 characters, then `…`. The codes quoted are IDs and coded values (MSH-9,
 * -11, -12, -18; ORC-1, priorities, modalities, CE/CWE.1 procedure codes: ST 20 in v2.5.1); a
 * longer text is no code, and quoted whole (5,000 characters of MSH-9.1 or ORC-1) it filled
 * our answer's ERR-8, which v2.7 and later give no length that would cut it.
 */
export function quotedCode(value: string): string {
  const chars = [...value];
  return chars.length <= 20 ? value : `${chars.slice(0, 20).join('')}…`;
}
