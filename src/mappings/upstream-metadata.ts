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
  readonly note?: string;
}

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
    note: 'Family^Given',
  },
  {
    key: 'patient_birth_date',
    from: 'patient.birthDate',
    // DICOM DA (PS3.5 6.2) and docs/upstream-assumptions.md: YYYYMMDD, nothing shorter. A
    // partial date (HL7 DT `1985` or `198507`, FHIR `1985-07`) is left out: sent, the upstream
    // refuses the whole order (400 invalid_metadata); the study's PatientBirthDate fills it.
    value: (r) => {
      const date = r.patient.birthDate;
      return date && /^\d{4}-\d{2}-\d{2}$/.test(date) ? date.replace(/-/g, '') : undefined;
    },
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
    note: 'Family^Given',
  },
  {
    key: 'products',
    from: 'products',
    value: (r) => (r.products.length > 0 ? r.products : undefined),
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
  const rows = options.sandboxOutcomeFromNotes
    ? [...UPSTREAM_METADATA_TABLE, SANDBOX_OUTCOME_ROW]
    : UPSTREAM_METADATA_TABLE;
  const metadata: Record<string, unknown> = {};
  for (const row of rows) {
    const value = row.value(request);
    if (value !== undefined) metadata[row.key] = value;
    else if (options.removeAbsent && row.key !== 'products') metadata[row.key] = null;
  }
  return metadata;
}

function personName(name: PersonName | undefined): string | undefined {
  if (!name || (!name.family && !name.given?.length)) return undefined;
  return [name.family ?? '', (name.given ?? []).join(' ')].join('^').replace(/\^$/, '');
}
