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
  value: number;
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
}

/** Field-name suffix → UCUM unit (UCUM: mL millilitre, % percent; annotation for percentile). */
const UNIT_SUFFIX: ReadonlyArray<{
  suffix: string;
  quantity: Measurement['quantity'];
  ucum: string;
  display: string;
  label: string;
}> = [
  { suffix: 'volume_ml', quantity: 'volume', ucum: 'mL', display: 'mL', label: 'volume' },
  {
    suffix: 'icv_percent',
    quantity: 'icv-fraction',
    ucum: '%',
    display: '%',
    label: 'volume, % of intracranial volume',
  },
  {
    suffix: 'percentile',
    quantity: 'percentile',
    ucum: '{percentile}',
    display: 'percentile',
    label: 'normative percentile',
  },
];

/**
 * A code of at most 14 characters (DICOM Code Value is SH, 16, PS3.3 8.8; HL7 CWE.1 stays
 * short): the text itself when short enough, else its first max−4 characters, a hyphen and a 3-character
 * hash, so distinct ids never collide on a common prefix.
 */
export function shortCode(text: string, max = 14): string {
  if (text.length <= max) return text.toUpperCase();
  let h = 2166136261;
  for (const c of text) h = Math.imul(h ^ c.charCodeAt(0), 16777619) >>> 0;
  return `${text.slice(0, max - 4)}-${(h % 46656).toString(36).padStart(3, '0')}`.toUpperCase();
}

/** Measurement codes: the finding's code and a letter (V volume, I % of ICV, P percentile). */
const QUANTITY_LETTER = { volume: 'V', 'icv-fraction': 'I', percentile: 'P', other: 'O' } as const;

export function slug(text: string): string {
  return (
    text
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '-')
      .replace(/^-|-$/g, '') || 'x'
  );
}

/** Reads the JSON results report; throws when it is not a JSON object. */
export function parseResultContent(body: Buffer | string): ResultContent {
  const parsed: unknown = JSON.parse(typeof body === 'string' ? body : body.toString('utf8'));
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new Error('the results report is not a JSON object');
  }
  const doc = parsed as Record<string, unknown>;
  const findings: Finding[] = [];
  const raw = Array.isArray(doc.findings) ? doc.findings : [];
  for (const f of raw) {
    if (!f || typeof f !== 'object') continue;
    const r = f as Record<string, unknown>;
    const structure = typeof r.structure === 'string' ? r.structure.trim() : '';
    if (!structure) continue;
    const trackingId = slug(structure);
    const measurements: Measurement[] = [];
    for (const u of UNIT_SUFFIX) {
      const v = r[u.suffix];
      if (typeof v !== 'number' || !Number.isFinite(v)) continue;
      measurements.push({
        id: `${trackingId}.${u.quantity}`,
        code: `${shortCode(trackingId)}.${QUANTITY_LETTER[u.quantity]}`,
        structure,
        quantity: u.quantity,
        label: `${structure} ${u.label}`,
        value: v,
        ucum: u.ucum,
        unitDisplay: u.display,
      });
    }
    const flag = r.flag === 'low' || r.flag === 'high' || r.flag === 'normal' ? r.flag : undefined;
    findings.push({
      structure,
      trackingId,
      code: shortCode(trackingId),
      measurements,
      ...(flag ? { flag } : {}),
    });
  }
  const str = (v: unknown): string | undefined =>
    typeof v === 'string' && v.trim() ? v.trim() : undefined;
  return {
    findings,
    impression: str(doc.impression),
    caveat: str(doc.caveat),
    qcBypassed: doc.qc_bypassed === true,
    reportedAt: str(doc.reported_at),
    disclaimer: str(doc.disclaimer),
  };
}

/** The report as plain text lines (HL7 OBX TX, SR text), from the neutral content. */
export function resultTextLines(content: ResultContent): string[] {
  const lines: string[] = [];
  for (const f of content.findings) {
    const parts = f.measurements.map((m) =>
      m.quantity === 'percentile' ? `P${m.value}` : `${m.value} ${m.unitDisplay}`,
    );
    lines.push(
      `${f.structure}: ${parts.join(', ')}${f.flag && f.flag !== 'normal' ? ` (${f.flag})` : ''}`,
    );
  }
  if (content.impression) lines.push(`Impression: ${content.impression}`);
  if (content.caveat) lines.push(`Caveat: ${content.caveat}`);
  if (content.disclaimer) lines.push(content.disclaimer);
  return lines;
}
