import { encodeSegment, formatHl7Timestamp, type Hl7SegmentSpec } from '../hl7/hl7-builder';
import { hl7EncodedLength, LOCAL, numberedFields, versionAtLeast } from './hl7-result.segments';
import type { Hl7ResultSettings } from './hl7-result.mapping';
import {
  boundedText,
  linesOf,
  oneLine,
  onlyInThePdf,
  resultTextLines,
  SEE_ATTACHED_REPORT,
} from './result-content.mapping';
import { noResultSentence } from './local-end-reasons';
import type { PublicationInput } from './publication.model';
import { embeddedPdf, pdfReference } from './result-pdf';

/** The OBX segments of an ORU^R01 (HL7 v2.5.1 chapter 7.4.2): what the outcome says, line by line. */

/**
 * Stands for an FT line break until the segment is encoded: a private-use character, which
 * the escaper leaves alone (it writes control characters as \Xhh\) and no report line keeps.
 */
const LINE_BREAK = '\uE000';

/** An OBX as wire text, FT line breaks written as the \.br\ formatting command. */
export function encodeObx(spec: Hl7SegmentSpec): string {
  const text = encodeSegment(spec);
  return spec.fields[1] === 'FT' ? text.replaceAll(LINE_BREAK, '\\.br\\') : text;
}

/**
 * The text of an OBX-3 code (CWE.2 / CE.2): an ST of at most 199 characters (v2.5.1 2A.2.74 and
 * the CWE component table), so one line, cut between characters and saying so. It holds the
 * upstream's structure name: one written over two lines went out as `Left\X0D\\X0A\hippocampus`,
 * and one of 190 characters as 224 ("… volume, % of intracranial volume").
 */
function codeText(text: string): string {
  return boundedText(oneLine(text), 199, hl7EncodedLength);
}

/** The OBX lines: text report, measurements, flags, PDF, DICOM UIDs. */
export function obxLines(
  input: PublicationInput,
  version: string,
  settings: Hl7ResultSettings,
): Hl7SegmentSpec[] {
  const out: Hl7SegmentSpec[] = [];
  // OBX-11 (table 0085) as OBR-25 says, unless the row names it: F only for a result, X for no
  // result, and I (results pending) for a status still in progress (a site publishing an ORU
  // for one): before, such an ORU's "No result." line went out as a final observation (F).
  const status =
    input.row.hl7.observationStatus ??
    ({ F: 'F', X: 'X' } as const)[input.row.hl7.resultStatus as 'F' | 'X'] ??
    'I';
  const obxStatus = status === 'F' && input.correction ? 'C' : status;
  const coded = versionAtLeast(version, '2.5') ? 'CWE' : 'CE';
  const add = (
    type: string,
    code: readonly string[],
    value: unknown,
    units?: readonly string[],
    flag?: string,
  ) => {
    out.push({
      id: 'OBX',
      fields: numberedFields({
        1: String(out.length + 1),
        2: type,
        3: code,
        5: value as never,
        6: units,
        8: flag,
        11: obxStatus,
        14: formatHl7Timestamp(new Date(input.statusAt)),
      }),
    });
  };
  const isResult = input.row.hl7.resultStatus === 'F';
  const lines = isResult
    ? // a result whose findings came only as the PDF: point to it, as the DiagnosticReport does
      // (before: "No result." with OBX-11 F beside the PDF of the results, or nothing at all)
      [
        ...(onlyInThePdf(input.results) ? [SEE_ATTACHED_REPORT] : []),
        ...(input.results ? resultTextLines(input.results) : []),
      ]
    : input.row.terminal
      ? [noResultSentence(input.row.conclusion, input.reason) || 'No result.']
      : // still in progress: where it stands (e.g. "ML analysis running"), not "No result."
        [[input.row.task.reason, input.row.note].filter(Boolean).join(': ')];
  if (isResult && (input.results?.qcBypassed || input.qcBypass) && !input.results?.caveat) {
    lines.push('QC failure was bypassed on user request: interpret with caution.');
  }
  // Text report: TX repeats one line per repetition; FT is one value whose lines are joined
  // by the \.br\ formatting command (v2.5.1 2.7.6), spliced in after escaping (LINE_BREAK).
  // A text the upstream wrote over several lines (an impression, a failure reason) has each of
  // its lines as one: before, its line breaks went out as hexadecimal data (`\X0D\\X0A\`),
  // which a RIS that does not decode it (optional, v2.5.1 2.7.6) shows in the report.
  const text = (type: 'TX' | 'FT', code: readonly string[], of: readonly string[]) => {
    const split = of.flatMap(linesOf);
    if (type === 'TX') add('TX', code, { repetitions: split });
    else add('FT', code, split.map((l) => l.replaceAll(LINE_BREAK, ' ')).join(LINE_BREAK));
  };
  text(settings.textType, ['REPORT', 'Report text', LOCAL], lines);
  if (isResult && input.results) {
    for (const f of input.results.findings) {
      for (const m of f.measurements) {
        // OBX-8 abnormal flags (table 0078): L / N / H on the volume line.
        const flag =
          m.quantity === 'volume' && f.flag
            ? { low: 'L', normal: 'N', high: 'H' }[f.flag]
            : undefined;
        add(
          'NM',
          [m.code, codeText(m.label), LOCAL],
          m.text,
          [m.ucum, m.unitDisplay, 'UCUM'],
          flag,
        );
      }
      if (f.flag)
        add(
          coded,
          [`${f.code}.F`, codeText(`${f.structure} evaluation`), LOCAL],
          [f.flag.toUpperCase(), f.flag, LOCAL],
        );
    }
    // ST is printable characters, meant for short strings (v2.5.1 2A.2.74: under 200, longer
    // ones TX or FT): an impression over several lines or longer is written as the report text.
    // Its length is counted as written, escapes included, as ORC-16's and OBX-3.2's are: an
    // impression of 199 characters with four `&` (`L & R`, `age & sex`) went out as an ST of 207.
    const impression = input.results.impression;
    if (impression && linesOf(impression).length === 1 && hl7EncodedLength(impression) < 200)
      add('ST', ['IMPRESSION', 'Impression', LOCAL], impression);
    else if (impression) text(settings.textType, ['IMPRESSION', 'Impression', LOCAL], [impression]);
  }
  if (input.qcReport !== undefined) {
    // The QC findings themselves, so the RIS user sees why the study was not analysable.
    add(
      'TX',
      ['QC-REPORT', 'Quality control report', LOCAL],
      boundedText(JSON.stringify(input.qcReport), 4000),
    );
  }
  const pdf = embeddedPdf(input);
  const pdfRef = pdfReference(input);
  const pdfName = isResult ? 'Report PDF' : 'Failure report PDF';
  if (pdf) {
    // ED (2A.2.24): source application ^ type ^ subtype ^ encoding ^ data.
    add(
      'ED',
      ['PDF', pdfName, LOCAL],
      [undefined, 'Application', 'PDF', 'Base64', pdf.toString('base64')],
    );
  } else if (pdfRef?.url) {
    // RP (2A.2.65): pointer ^ application ID ^ type of data ^ subtype — the PACS's copy
    add('RP', ['PDF', pdfName, LOCAL], [pdfRef.url, 'PACS', 'Application', 'PDF']);
  } else if (pdfRef) {
    add(
      'TX',
      ['PDF', pdfName, LOCAL],
      `PDF of ${pdfRef.bytes} bytes not sent in this message (larger than the embed limit)`,
    );
  }
  const study = input.dicom?.studyInstanceUid ?? input.order.studyInstanceUid;
  if (study) add('ST', ['110180', 'Study Instance UID', 'DCM'], study);
  if (isResult && input.dicom)
    add('ST', ['SR-UID', 'SR SOP Instance UID', LOCAL], input.dicom.srInstanceUid);
  return out;
}
