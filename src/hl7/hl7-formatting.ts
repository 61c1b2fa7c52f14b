/**
 * What a formatting command (\.br\ \.sp\ \.in\ \.ti\ \.sk\ \.ce\ \.fi\ \.nf\, and the
 * highlighting \H\ \N\) means at one position. HL7 v2.5.1 §2.7.6: they are defined for the FT
 * (formatted text) data type only. One rule for every position, by data type:
 * - `lines`: FT (NTE-3; OBX-5 when OBX-2 is FT): \.br\ and \.sp<n>\ are line breaks;
 * - `identifier`: an identifier (CX, EI, and the ST placer/filler fields that carry the
 *   accession): a \.br\ stays the line break the sender wrote, so the one identifier rule
 *   (src/domain/identifier-bounds.ts) refuses it (AE 102) rather than the order being known by
 *   a value the RIS never sent;
 * - `text`: every other type (a name, an address, a code's text, ST/TX): \.br\ and \.sp\ are
 *   one space (none at either end of the value, none beside a space), the other commands carry
 *   nothing, and a quirk names the place. Before, PID-5 `SCHMIDT\.br\JR` was stored, sent
 *   upstream, in FHIR and in our ORU with a line break in the family name.
 */
export type FormattingMode = 'lines' | 'identifier' | 'text';

/** Fields (v2.5.1) whose data type is FT, or an identifier, by segment ID. */
const FORMATTING_BY_FIELD: Readonly<Record<string, Readonly<Record<number, FormattingMode>>>> = {
  NTE: { 3: 'lines' }, // NTE-3 comment, FT (§2.15.10)
  PID: { 2: 'identifier', 3: 'identifier', 4: 'identifier', 18: 'identifier' }, // CX
  MRG: { 1: 'identifier', 2: 'identifier', 3: 'identifier', 4: 'identifier', 5: 'identifier' },
  ORC: { 2: 'identifier', 3: 'identifier', 4: 'identifier' }, // EI
  // OBR-2/3 EI; OBR-18..21 placer/filler fields (ST), where RIS put the accession number
  OBR: {
    2: 'identifier',
    3: 'identifier',
    18: 'identifier',
    19: 'identifier',
    20: 'identifier',
    21: 'identifier',
  },
  IPC: { 1: 'identifier', 2: 'identifier', 3: 'identifier', 4: 'identifier' }, // EI
  ZDS: { 1: 'identifier' }, // Study Instance UID (RP)
};

/**
 * The formatting mode of a field of segment `id`; `valueType` is OBX-2 for OBX-5, whose type
 * the message names (§7.4.2.2).
 */
export function formattingModeOf(id: string, field: number, valueType?: string): FormattingMode {
  if (id === 'OBX' && field === 5) return valueType === 'FT' ? 'lines' : 'text';
  return FORMATTING_BY_FIELD[id]?.[field] ?? 'text';
}
