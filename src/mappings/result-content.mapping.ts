import { parseJsonAllowingNonFinite } from '../common/json-non-finite';

/**
 * The upstream's JSON results report read into a neutral shape the three publishers share.
 * The contract does not show the report's field names (imaging-service-api.md, Reports); we
 * read the shape the sandbox and the vendor's samples use (`findings[]` with `structure`,
 * `volume_ml`, `icv_percent`, `percentile`, `flag`; `impression`, `caveat`, `qc_bypassed`).
 * Unknown numeric fields of a finding are kept when their suffix names a unit; anything else
 * is ignored (the PDF and the text carry the whole report).
 */
export interface Measurement {
  /** Stable id of the measured quantity, e.g. `left-hippocampus.volume`. */
  id: string;
  /** A code of at most 16 characters (DICOM SH Code Value, HL7 CWE.1), e.g. `WHOLE-BRAIN.V` */
  code: string;
  structure: string;
  quantity: 'volume' | 'icv-fraction' | 'percentile' | 'other';
  label: string;
  /** The value as published: `Number(text)`, so FHIR, HL7 and DICOM say the same number. */
  value: number;
  /** The value as written in HL7 NM and DICOM DS: a plain decimal of at most 16 characters. */
  text: string;
  /** UCUM (https://ucum.org): `mL`, `%`, `{percentile}`. */
  ucum: string;
  unitDisplay: string;
}

export interface Finding {
  structure: string;
  trackingId: string;
  /** The tracking id as a code of at most 14 characters (room for a measurement suffix). */
  code: string;
  measurements: Measurement[];
  /** Qualitative evaluation against the reference (low / normal / high). */
  flag?: 'low' | 'normal' | 'high';
}

export interface ResultContent {
  findings: Finding[];
  impression?: string;
  caveat?: string;
  qcBypassed: boolean;
  reportedAt?: string;
  disclaimer?: string;
  /**
   * Values of the report that are not published, each with why (a negative volume, a
   * percentage over 100, a number too large to write): the PDF still shows the report whole.
   */
  leftOut: string[];
}

/**
 * Field-name suffix → UCUM unit (UCUM: mL millilitre, % percent; annotation for percentile),
 * with the values the quantity can take: a volume is not negative, a share of the intracranial
 * volume and a percentile lie within 0–100. A value outside is an upstream fault, never a
 * finding: it is left out (`leftOut`), not published as a measurement.
 */
const UNIT_SUFFIX: ReadonlyArray<{
  suffix: string;
  quantity: Measurement['quantity'];
  ucum: string;
  display: string;
  label: string;
  min: number;
  max?: number;
}> = [
  { suffix: 'volume_ml', quantity: 'volume', ucum: 'mL', display: 'mL', label: 'volume', min: 0 },
  {
    suffix: 'icv_percent',
    quantity: 'icv-fraction',
    ucum: '%',
    display: '%',
    label: 'volume, % of intracranial volume',
    min: 0,
    max: 100,
  },
  {
    suffix: 'percentile',
    quantity: 'percentile',
    ucum: '{percentile}',
    display: 'percentile',
    label: 'normative percentile',
    min: 0,
    max: 100,
  },
];

/**
 * The largest magnitude written: below 10^15 every value fits DICOM DS (16 characters, PS3.5
 * Table 6.2-1) and HL7 NM (digits, sign and a decimal point, no exponent: v2.5.1 2A.2.49)
 * without losing its integer part. Before, 1e308 was written NM `1e+308` and a percentile of
 * 123456789012345678 was cut by the DICOM writer to DS `1234567890123456`, a hundredth of it.
 */
const MAX_MAGNITUDE = 1e15;

/** A value as a plain decimal of at most 16 characters, the most digits that fit (no exponent). */
export function decimalText(value: number): string {
  for (let digits = 15; digits > 0; digits--) {
    const text = value
      .toFixed(digits)
      .replace(/(\.\d*?)0+$/, '$1')
      .replace(/\.$/, '');
    if (text.length <= 16) return text === '-0' ? '0' : text;
  }
  const whole = value.toFixed(0);
  return whole === '-0' ? '0' : whole;
}

/** A structure as the audit names it: printable, at most 64 characters. */
function named(structure: string): string {
  // eslint-disable-next-line no-control-regex -- control characters are what is replaced
  const text = structure.replace(/[\u0000-\u001f\u007f]/g, ' ');
  return text.length > 64 ? `${text.slice(0, 63)}…` : text;
}

/**
 * A value of the report as the audit names it: a string or a number as written, an array or an
 * object by its kind. Written out as JSON, a flag nested 20,000 levels deep (40 KB of report)
 * overflowed the stack in the fetch job's check: the job failed at every retry and the result
 * never reached the clinic.
 */
function said(value: unknown): string {
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : String(value);
}

/** Why a value is not published for its quantity, or undefined when it is. */
function outOfRange(value: number, unit: (typeof UNIT_SUFFIX)[number]): string | undefined {
  if (Math.abs(value) >= MAX_MAGNITUDE) return 'too large to be a measurement';
  if (value < unit.min) return `below ${unit.min}`;
  if (unit.max !== undefined && value > unit.max) return `above ${unit.max}`;
  return undefined;
}

/**
 * A code of at most 14 characters (DICOM Code Value is SH, 16, PS3.3 8.8; HL7 CWE.1 stays
 * short): the text itself when short enough, else its first max−4 characters, a hyphen and a 3-character
 * hash, so distinct ids never collide on a common prefix.
 */
export function shortCode(text: string, max = 14): string {
  if (text.length <= max) return text.toUpperCase();
  return `${text.slice(0, max - 4)}-${hash3(text)}`.toUpperCase();
}

/** Three base-36 characters of a 32-bit FNV-1a hash of `text`'s UTF-16 units. */
function hash3(text: string): string {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619) >>> 0;
  return (h % 46656).toString(36).padStart(3, '0');
}

/** Measurement codes: the finding's code and a letter (V volume, I % of ICV, P percentile). */
/**
 * How a report may spell a finding's flag (the contract names no field schema): the words in
 * any case and HL7 table 0078's letters. Dropped for its spelling, a low hippocampus went out
 * without its L (OBX-8, Observation.interpretation, the SR); one not read is named as left out.
 */
const FLAG_SPELLINGS: ReadonlyMap<string, 'low' | 'normal' | 'high'> = new Map([
  ['low', 'low'],
  ['l', 'low'],
  ['normal', 'normal'],
  ['n', 'normal'],
  ['high', 'high'],
  ['h', 'high'],
] as const);

const QUANTITY_LETTER = { volume: 'V', 'icv-fraction': 'I', percentile: 'P', other: 'O' } as const;

export function slug(text: string): string {
  return (
    text
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '-')
      .replace(/^-|-$/g, '') || 'x'
  );
}

/**
 * The tracking id of each structure of one report: its slug, distinct within the report, the
 * same for the same report (a correction tracks the same findings). Letters the slug cannot
 * keep (a Japanese site's 左海馬 and 右海馬, left and right hippocampus) add a hash of the
 * name (accents are only dropped: `caudé` is `caude`); a name given again (a lesion product
 * lists every lesion as `Lesion`) or slugged alike (`Lesion` / `lesion`) takes `-2`, `-3`….
 * Before, each such structure had one code and one Tracking Unique Identifier: the RIS kept
 * one observation per OBX-3 (the left volume overwritten by the right) and the SR called two
 * structures one tracked finding. Neither the tracking id nor its code is taken twice.
 */
function trackingIds(structures: readonly string[]): string[] {
  const ids = new Set<string>();
  const codes = new Set<string>();
  // the next suffix to try per base, so that n repeats of a name cost n tries, not n²/2
  const next = new Map<string, number>();
  return structures.map((structure) => {
    const latin = structure.normalize('NFKD').replace(/\p{M}/gu, '');
    const lost = /[^ -~]/.test(latin.replace(/[^\p{L}\p{N}]/gu, ''));
    const base = lost ? `${slug(latin)}-${hash3(structure)}` : slug(latin);
    let id = base;
    let k = next.get(base) ?? 2;
    while (ids.has(id) || codes.has(shortCode(id))) id = `${base}-${k++}`;
    next.set(base, k);
    ids.add(id);
    codes.add(shortCode(id));
    return id;
  });
}

/**
 * The longest texts of a report we publish, in characters. A report's texts go into FHIR
 * strings (at most 1 MiB, R4 datatypes.html#string: a 3 MB failure reason had the whole
 * DiagnosticReport refused by our own validation, so the EHR never heard the order failed),
 * HL7 OBX-5 and DICOM LO/UT values, and into the audit: a sentence, not a document. The PDF
 * carries the report whole.
 */
/**
 * The most findings of one report published as measurements (a whole-brain parcellation has
 * about 180 structures). Each becomes a measurement group of the SR, Observations of the
 * DiagnosticReport and OBX segments of the ORU: 3,000 findings (300 KB of a report that may
 * be 32 MB) took 9 s to build and validate as FHIR and 20 s to write as DICOM, on the event
 * loop the intake shares, at every retry. The findings past it are named in `leftOut`; the
 * PDF has the report whole.
 */
/**
 * The lines of a text, whatever its line breaks: CR LF, CR, LF, and the Unicode ones a report
 * written on another platform may hold (NEL U+0085, LINE SEPARATOR U+2028, PARAGRAPH SEPARATOR
 * U+2029), which went out inside one TX/FT line or ST.
 */
export function linesOf(text: string): string[] {
  return text.split(/\r\n|[\r\n\u0085\u2028\u2029]/);
}

/** A text as one line (an ST such as CE.2): its lines trimmed and joined by a space. */
export function oneLine(text: string): string {
  return linesOf(text)
    .map((line) => line.trim())
    .filter(Boolean)
    .join(' ');
}

export const MAX_FINDINGS = 300;

export const MAX_TEXT = {
  /** A structure name (tracking identifier, code meaning, display). */
  structure: 200,
  /** The failure reason (Task.statusReason, the conclusion, ORC-16, the ORU text). */
  reason: 1_000,
  /** The impression, a caveat, a disclaimer. */
  statement: 10_000,
} as const;

const SHORTENED = ' … (shortened; the report has the whole text)';

/**
 * The text of a result whose findings came only as the PDF (no usable JSON report): the
 * DiagnosticReport's conclusion and the ORU's text OBX both point to the attached report.
 */
export const SEE_ATTACHED_REPORT = 'See the attached report.';

/**
 * Whether a result's findings are only in the PDF: no usable JSON report, or one with no finding
 * and no impression. The DiagnosticReport's conclusion, the ORU's text and the SR's impression
 * then say SEE_ATTACHED_REPORT; before, the ORU's text was empty with OBX-11 F and the SR a
 * COMPLETE, FINAL report with nothing in it, which read as "nothing found".
 */
export function onlyInThePdf(content: ResultContent | undefined): boolean {
  return !content || (content.findings.length === 0 && !content.impression);
}

/**
 * `text` cut to at most `max` characters (whole code points), saying that it was. `lengthOf`
 * counts a text as its field holds it: an HL7 field is counted as encoded, its escape sequences
 * included (hl7EncodedLength), so a reason of 199 `|` is not 597 characters on the wire.
 */
export function boundedText(
  text: string,
  max: number,
  lengthOf: (s: string) => number = (s) => s.length,
  /** What says the text was shortened; none for a name, cut as its type allows (HL7 `#`). */
  marker: string = SHORTENED,
): string {
  if (lengthOf(text) <= max) return text;
  const room = max - lengthOf(marker);
  let cut = '';
  let used = 0;
  for (const ch of text) {
    const n = lengthOf(ch);
    if (used + n > room) break;
    cut += ch;
    used += n;
  }
  return `${cut.trimEnd()}${marker}`;
}

/**
 * Whether the report says QC was bypassed: any value but one that plainly says no (absent,
 * null, false, 0, `"false"`, `"no"`, ""). The caution is the safe side: only the JSON value
 * true was read, and `"qc_bypassed": "true"` from an upstream whose bypass was decided outside
 * our API published a result on a study that failed QC without "interpret with caution".
 */
function qcBypassedOf(value: unknown): boolean {
  if (value === undefined || value === null || value === false || value === 0) return false;
  if (typeof value === 'string') return !/^\s*(false|no|n|0|)\s*$/i.test(value);
  return true;
}

/** Reads the JSON results report; throws when it is not a JSON object. */
export function parseResultContent(body: Buffer | string): ResultContent {
  const parsed: unknown = parseJsonAllowingNonFinite(
    typeof body === 'string' ? body : body.toString('utf8'),
  );
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new Error('the results report is not a JSON object');
  }
  const doc = parsed as Record<string, unknown>;
  const findings: Finding[] = [];
  const leftOut: string[] = [];
  const raw = (Array.isArray(doc.findings) ? doc.findings : []).flatMap((f) => {
    if (!f || typeof f !== 'object') return [];
    const r = f as Record<string, unknown>;
    const structure =
      typeof r.structure === 'string' ? boundedText(r.structure.trim(), MAX_TEXT.structure) : '';
    return structure ? [{ r, structure }] : [];
  });
  if (raw.length > MAX_FINDINGS) {
    const first = named(raw[MAX_FINDINGS]!.structure);
    const last = named(raw.at(-1)!.structure);
    leftOut.push(
      `${raw.length - MAX_FINDINGS} findings after the first ${MAX_FINDINGS} (${first} … ${last}): more than a report publishes as measurements`,
    );
    raw.length = MAX_FINDINGS;
  }
  const ids = trackingIds(raw.map((f) => f.structure));
  for (const [i, { r, structure }] of raw.entries()) {
    const trackingId = ids[i]!;
    const measurements: Measurement[] = [];
    for (const u of UNIT_SUFFIX) {
      const v = r[u.suffix];
      if (v === undefined || v === null) continue;
      // A value that is not a JSON number ("3.12", "NaN", true) is not guessed at: named as
      // left out. Before, it vanished without a word (no note, "Left hippocampus: " in the text).
      if (typeof v !== 'number' || !Number.isFinite(v)) {
        const shown = typeof v === 'string' ? `"${named(v)}"` : named(said(v));
        leftOut.push(`${named(structure)} ${u.suffix} ${shown} (not a number)`);
        continue;
      }
      const why = outOfRange(v, u);
      if (why) {
        leftOut.push(`${named(structure)} ${u.suffix} ${String(v)} (${why})`);
        continue;
      }
      const text = decimalText(v);
      measurements.push({
        id: `${trackingId}.${u.quantity}`,
        code: `${shortCode(trackingId)}.${QUANTITY_LETTER[u.quantity]}`,
        structure,
        quantity: u.quantity,
        label: `${structure} ${u.label}`,
        value: Number(text),
        text,
        ucum: u.ucum,
        unitDisplay: u.display,
      });
    }
    const flag =
      typeof r.flag === 'string' ? FLAG_SPELLINGS.get(r.flag.trim().toLowerCase()) : undefined;
    if (!flag && r.flag != null && r.flag !== '') {
      leftOut.push(`${named(structure)} flag "${named(said(r.flag))}" (not low, normal or high)`);
    }
    findings.push({
      structure,
      trackingId,
      code: shortCode(trackingId),
      measurements,
      ...(flag ? { flag } : {}),
    });
  }
  const str = (v: unknown, max: number = MAX_TEXT.statement): string | undefined =>
    typeof v === 'string' && v.trim() ? boundedText(v.trim(), max) : undefined;
  return {
    findings,
    impression: str(doc.impression),
    caveat: str(doc.caveat),
    qcBypassed: qcBypassedOf(doc.qc_bypassed),
    reportedAt: str(doc.reported_at, MAX_TEXT.structure),
    disclaimer: str(doc.disclaimer),
    leftOut,
  };
}

/** The report as plain text lines (HL7 OBX TX, SR text), from the neutral content. */
export function resultTextLines(content: ResultContent): string[] {
  const lines: string[] = [];
  for (const f of content.findings) {
    const parts = f.measurements.map((m) =>
      m.quantity === 'percentile' ? `P${m.text}` : `${m.text} ${m.unitDisplay}`,
    );
    // a finding whose values were all left out says so, rather than "Left hippocampus: "
    lines.push(
      `${f.structure}: ${parts.join(', ') || 'no measurement published'}${f.flag && f.flag !== 'normal' ? ` (${f.flag})` : ''}`,
    );
  }
  if (content.impression) lines.push(`Impression: ${content.impression}`);
  if (content.caveat) lines.push(`Caveat: ${content.caveat}`);
  if (content.disclaimer) lines.push(content.disclaimer);
  return lines;
}
