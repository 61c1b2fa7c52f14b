/**
 * Deviations from the HL7v2 encoding rules (HL7 v2.5.1 ch. 2.5-2.7) that the parser tolerated.
 * They are data, recorded in the audit log with each message, never silently dropped.
 */
export type Hl7QuirkCode =
  | 'bom'
  | 'lf-separators'
  | 'crlf-separators'
  | 'mixed-separators'
  | 'blank-lines'
  | 'nul-padding'
  | 'trailing-whitespace'
  | 'trailing-field-separator'
  | 'leading-whitespace'
  | 'z-segment'
  | 'custom-encoding-characters'
  | 'truncation-character'
  | 'latin1-charset'
  | 'undeclared-charset-non-ascii'
  | 'declared-ascii-non-ascii'
  | 'invalid-utf8'
  | 'utf8-despite-declared-charset'
  | 'hex-data-not-utf8'
  | 'windows-1252-bytes'
  | 'windows-code-page-bytes'
  | 'unknown-charset'
  | 'unknown-escape-sequence'
  | 'charset-escape'
  | 'local-escape'
  | 'formatting-escape'
  | 'explicit-null'
  | 'obr-without-orc'
  | 'segment-outside-order'
  | 'free-text-sex'
  | 'free-text-priority'
  | 'invalid-date'
  | 'value-not-mapped'
  | 'field-conflict'
  | 'accession-longer-than-dicom'
  | 'identifier-control-character'
  | 'lowercase-segment-id'
  | 'lowercase-code'
  | 'padded-code'
  | 'mllp-missing-cr';

export interface Hl7Quirk {
  code: Hl7QuirkCode;
  detail: string;
}

/** Collects quirks once per code+detail, in first-seen order. */
export class QuirkCollector {
  private readonly seen = new Set<string>();
  readonly quirks: Hl7Quirk[] = [];

  add(code: Hl7QuirkCode, detail: string): void {
    const key = `${code}\u0000${detail}`;
    if (this.seen.has(key)) return;
    this.seen.add(key);
    this.quirks.push({ code, detail });
  }
}
