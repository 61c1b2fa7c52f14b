import { isSandboxOutcome } from '../imaging-spec/sandbox-outcomes';
import { primaryIdentifier } from '../domain/patient-identity';
import type { AdministrativeSex, OrderRequest, PersonName } from '../domain/order-request';

/**
 * Our order → the upstream's order metadata (keys of docs/upstream-assumptions.md, "Order
 * metadata keys"). Pure. `correlation_id` is added by the client on create, never here.
 */
export interface UpstreamMetadataOptions {
  /**
   * Only against the sandbox: an order note `sandbox-outcome: <outcome>` becomes the
   * sandbox's `sandbox_outcome` key, so end-to-end runs can choose a path through HL7 or
   * FHIR input. Never sent to a real upstream.
   */
  sandboxOutcomeFromNotes?: boolean;
  /**
   * For `PATCH /add-metadata`: a key the order has no value for (any more) is sent `null`,
   * which removes the value the upstream was given before (docs/upstream-assumptions.md), so
   * the upstream never keeps a birth date, sex or physician our order no longer states; left
   * out, the upstream would keep the old value. `products` is never removed (an order always
   * runs some), and `correlation_id` is not a row (the create's value stays).
   */
  removeAbsent?: boolean;
}

const SEX: Record<AdministrativeSex, string> = {
  male: 'M',
  female: 'F',
  other: 'O',
  unknown: 'U',
};

const SANDBOX_NOTE = /sandbox[-_ ]outcome\s*[:=]\s*([a-z_]+)/i;

/** One metadata key: where its value comes from in our order, and in which format. */
export interface UpstreamMetadataRow {
  readonly key: string;
  /** The OrderRequest path(s) read, for people and the audit lineage. */
  readonly from: string;
  /** The value sent, or undefined when the order does not know it (the key is left out). */
  readonly value: (request: OrderRequest) => unknown;
  /** Why the order's value for this key is not sent (it has one, but not in a form the key takes). */
  readonly leftOut?: (request: OrderRequest) => string | undefined;
  /** How the value sent differs from the order's (characters the key's format cannot hold). */
  readonly changed?: (request: OrderRequest) => string | undefined;
  readonly note?: string;
}

/**
 * The longest string value the upstream takes in a metadata key (docs/upstream-assumptions.md,
 * "Order metadata keys"; longer, the whole order is refused 400 invalid_metadata).
 */
export const MAX_METADATA_CHARS = 1024;

/** A metadata key of the order that is not sent, and why (for the order's timeline; no value). */
export interface LeftOutKey {
  key: string;
  reason: string;
}

const FULL_DATE = /^\d{4}-\d{2}-\d{2}$/;

/**
 * Our order → the upstream's order metadata: one row per key (docs/upstream-assumptions.md,
 * "Order metadata keys"; the contract names none). A key the order has no value for is left
 * out, never sent empty.
 */
export const UPSTREAM_METADATA_TABLE: readonly UpstreamMetadataRow[] = [
  {
    key: 'patient_id',
    from: 'patient.identifiers (type MR, MRN, PI, PT, PN; else the first not national/insurance)',
    value: (r) => primaryIdentifier(r.patient)?.value,
  },
  {
    key: 'patient_name',
    from: 'patient.name',
    value: (r) => personName(r.patient.name),
    changed: (r) => nameChange(r.patient.name),
    note: 'Family^Given (DICOM PN); ^ = \\ and control characters within a part become spaces',
  },
  {
    key: 'patient_birth_date',
    from: 'patient.birthDate',
    // DICOM DA (PS3.5 6.2) and docs/upstream-assumptions.md: YYYYMMDD, nothing shorter. A
    // partial date (HL7 DT `1985` or `198507`, FHIR `1985-07`) is left out: sent, the upstream
    // refuses the whole order (400 invalid_metadata); the study's PatientBirthDate fills it.
    value: (r) => {
      const date = r.patient.birthDate;
      return date && FULL_DATE.test(date) ? date.replace(/-/g, '') : undefined;
    },
    leftOut: (r) =>
      r.patient.birthDate && !FULL_DATE.test(r.patient.birthDate)
        ? 'a partial date; the upstream takes YYYYMMDD only'
        : undefined,
    note: "YYYYMMDD (DICOM DA); a partial date is left out (the study's PatientBirthDate fills it)",
  },
  {
    key: 'patient_sex',
    from: 'patient.sex',
    value: (r) => (r.patient.sex ? SEX[r.patient.sex] : undefined),
    note: 'M, F, O, U (DICOM PatientSex)',
  },
  { key: 'accession_number', from: 'accessionNumber', value: (r) => r.accessionNumber },
  { key: 'study_uid', from: 'studyInstanceUid', value: (r) => r.studyInstanceUid },
  { key: 'modality', from: 'modality', value: (r) => r.modality },
  { key: 'procedure_code', from: 'procedure.code', value: (r) => r.procedure?.code },
  { key: 'priority', from: 'priority', value: (r) => r.priority },
  {
    key: 'referring_physician',
    from: 'orderingProvider.name',
    value: (r) => personName(r.orderingProvider?.name),
    changed: (r) => nameChange(r.orderingProvider?.name),
    note: 'Family^Given (DICOM PN); ^ = \\ and control characters within a part become spaces',
  },
  {
    key: 'products',
    from: 'products',
    // A change sent as the ORC alone asks for no products (the order keeps its own): none here.
    value: (r) => (r.products?.length ? r.products : undefined),
  },
];

/** Only against the sandbox: the order note that chooses the sandbox's path. */
export const SANDBOX_OUTCOME_ROW: UpstreamMetadataRow = {
  key: 'sandbox_outcome',
  from: 'notes ("sandbox-outcome: <outcome>")',
  value: (r) => {
    let chosen: string | undefined;
    for (const note of r.notes ?? []) {
      const outcome = SANDBOX_NOTE.exec(note)?.[1]?.toLowerCase();
      if (isSandboxOutcome(outcome)) chosen = outcome;
    }
    return chosen;
  },
  note: 'sandbox only; the last known outcome named in a note wins',
};

export function toUpstreamMetadata(
  request: OrderRequest,
  options: UpstreamMetadataOptions = {},
): Record<string, unknown> {
  return upstreamMetadataOf(request, options).metadata;
}

/**
 * The metadata sent, and the keys of the order that are left out because the upstream would
 * refuse their value (a partial birth date, a string longer than MAX_METADATA_CHARS): sent,
 * the whole order would be refused; left out, the study's own value (DICOM tags) fills the
 * key and the analyst reads on the order's timeline what was not sent.
 */
export function upstreamMetadataOf(
  request: OrderRequest,
  options: UpstreamMetadataOptions = {},
): { metadata: Record<string, unknown>; leftOut: LeftOutKey[]; changed: LeftOutKey[] } {
  const rows = options.sandboxOutcomeFromNotes
    ? [...UPSTREAM_METADATA_TABLE, SANDBOX_OUTCOME_ROW]
    : UPSTREAM_METADATA_TABLE;
  const metadata: Record<string, unknown> = {};
  const leftOut: LeftOutKey[] = [];
  const changed: LeftOutKey[] = [];
  for (const row of rows) {
    let value = row.value(request);
    const tooLong = longestString(value);
    if (tooLong > MAX_METADATA_CHARS) {
      leftOut.push({
        key: row.key,
        reason: `${tooLong} characters, more than the ${MAX_METADATA_CHARS} the upstream takes`,
      });
      value = undefined;
    } else {
      const reason = row.leftOut?.(request);
      if (reason) leftOut.push({ key: row.key, reason });
      const change = value === undefined ? undefined : row.changed?.(request);
      if (change) changed.push({ key: row.key, reason: change });
    }
    if (value !== undefined) metadata[row.key] = value;
    else if (options.removeAbsent && row.key !== 'products') metadata[row.key] = null;
  }
  return { metadata, leftOut, changed };
}

/** The timeline line for keys left out or changed (their names and why; never their values). */
export function leftOutSummary(
  leftOut: readonly LeftOutKey[],
  changed: readonly LeftOutKey[] = [],
): string {
  const list = (notes: readonly LeftOutKey[]) =>
    notes.map((l) => `${l.key} (${l.reason})`).join('; ');
  return [
    leftOut.length > 0 ? `metadata not sent upstream: ${list(leftOut)}` : '',
    changed.length > 0 ? `metadata changed for the upstream: ${list(changed)}` : '',
  ]
    .filter(Boolean)
    .join('; ');
}

/** The length of a string value, or of the longest string of a list. */
function longestString(value: unknown): number {
  if (typeof value === 'string') return value.length;
  if (Array.isArray(value))
    return Math.max(0, ...value.map((v) => (typeof v === 'string' ? v.length : 0)));
  return 0;
}

/**
 * DICOM PN (PS3.5 6.2): `^` separates the parts, `=` the alphabetic, ideographic and phonetic
 * groups, `\` the values, and no control character is allowed. One of them inside a part (a
 * decoded HL7 `\S\`, a FHIR family `O^Brien`, a BEL) would make the upstream read another
 * name: family `O`, given `Brien`. Each becomes a space.
 */
const PN_RESERVED = /[\^=\\\p{Cc}]/gu;

function namePart(part: string): string {
  return part.replace(PN_RESERVED, ' ');
}

function personName(name: PersonName | undefined): string | undefined {
  if (!name || (!name.family && !name.given?.length)) return undefined;
  const family = namePart(name.family ?? '');
  return [family, (name.given ?? []).map(namePart).join(' ')].join('^').replace(/\^$/, '');
}

function nameChange(name: PersonName | undefined): string | undefined {
  const parts = [name?.family ?? '', ...(name?.given ?? [])];
  return parts.some((p) => new RegExp(PN_RESERVED.source, 'u').test(p))
    ? 'a ^, =, \\ or control character within a name part became a space'
    : undefined;
}
