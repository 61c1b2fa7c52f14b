import {
  isSandboxOutcome,
  SANDBOX_OUTCOMES,
  type SandboxOutcome,
} from '../imaging-spec/sandbox-outcomes';
import { badRequest } from './sandbox.error';

export type { SandboxOutcome } from '../imaging-spec/sandbox-outcomes';

export type MetadataValue = string | number | boolean | string[];
export type Metadata = Record<string, MetadataValue>;

/** Products the sandbox offers (GET /products). `UDI`/`fda_desc` null when unassigned (contract, 1.0.8). */
export const SANDBOX_PRODUCTS = [
  {
    id: 'neuro-volumetry',
    name: 'Brain MRI volumetry',
    version: '3.2.0',
    UDI: '(01)00812345678906(10)3.2.0',
    fda_desc: 'Automated brain MRI volumetric quantification software (synthetic sandbox product)',
  },
  {
    id: 'hippocampal-atrophy',
    name: 'Hippocampal atrophy index',
    version: '1.4.1',
    UDI: '(01)00812345678913(10)1.4.1',
    fda_desc: 'Hippocampal volume and asymmetry analysis (synthetic sandbox product)',
  },
  {
    id: 'white-matter-lesions',
    name: 'White matter lesion quantification',
    version: '0.9.0',
    UDI: null,
    fda_desc: null,
  },
  // The ids of the adapter's example product table (src/mappings/product-table.ts), so that an
  // adapter started with nothing configured places its orders here. Synthetic: every sandbox
  // report is the brain-MRI volumetry report whatever the product.
  ...(
    [
      ['brain-mr-volumetry', 'Brain MR volumetry (example table)'],
      ['head-ct-hemorrhage', 'Head CT hemorrhage triage (example table)'],
      ['lung-nodule-ct', 'Lung nodule CT (example table)'],
      ['liver-lesion-ct', 'Liver lesion CT (example table)'],
      ['chest-xr-triage', 'Chest X-ray triage (example table)'],
      ['mammo-density', 'Mammography density (example table)'],
    ] as const
  ).map(([id, name]) => ({ id, name, version: '1.0.0', UDI: null, fda_desc: null })),
] as const;

export const DEFAULT_PRODUCTS = ['neuro-volumetry'];

const UID = /^(0|[1-9]\d*)(\.(0|[1-9]\d*))*$/;

/** DICOM DA (PS3.5 6.2): YYYYMMDD naming a day of the calendar (not 19851345, not 19850230). */
function isCalendarDate(v: string): boolean {
  const m = /^(\d{4})(\d{2})(\d{2})$/.exec(v);
  if (!m) return false;
  const [year, month, day] = [Number(m[1]), Number(m[2]), Number(m[3])];
  const date = new Date(Date.UTC(2000, month - 1, day));
  date.setUTCFullYear(year);
  return date.getUTCMonth() === month - 1 && date.getUTCDate() === day;
}

/** Per-key checks for the keys of docs/upstream-assumptions.md "Order metadata keys". */
const RULES: Record<string, (v: MetadataValue) => string | null> = {
  patient_birth_date: (v) =>
    typeof v === 'string' && isCalendarDate(v) ? null : 'must be a date YYYYMMDD',
  patient_sex: (v) =>
    typeof v === 'string' && ['M', 'F', 'O', 'U'].includes(v) ? null : 'must be one of M, F, O, U',
  study_uid: (v) =>
    typeof v === 'string' && v.length <= 64 && UID.test(v)
      ? null
      : 'must be a DICOM UID (digits and dots, at most 64 characters)',
  priority: (v) =>
    typeof v === 'string' && ['routine', 'urgent', 'asap', 'stat'].includes(v)
      ? null
      : 'must be one of routine, urgent, asap, stat',
  products: (v) => {
    if (!Array.isArray(v) || v.length === 0) return 'must be a non-empty array of product ids';
    const known = SANDBOX_PRODUCTS.map((p) => p.id as string);
    const unknown = v.filter((p) => !known.includes(p));
    return unknown.length > 0
      ? `unknown product id(s): ${unknown.join(', ')} (see GET /products)`
      : null;
  },
  sandbox_outcome: (v) =>
    isSandboxOutcome(v) ? null : `must be one of ${SANDBOX_OUTCOMES.join(', ')}`,
};

const STRING_KEYS = [
  'patient_id',
  'patient_name',
  'accession_number',
  'modality',
  'procedure_code',
  'referring_physician',
  'correlation_id',
  'institution_name',
];

/**
 * Validates an API metadata object. `null` values are allowed only when `allowNull` (add-metadata:
 * removes that API value, so a DICOM/sidecar value shows through again).
 */
export function validateMetadata(
  input: Record<string, unknown>,
  allowNull: boolean,
): Record<string, MetadataValue | null> {
  const out: Record<string, MetadataValue | null> = {};
  const problems: string[] = [];
  for (const [key, value] of Object.entries(input)) {
    if (!/^[A-Za-z][A-Za-z0-9_]{0,63}$/.test(key)) {
      problems.push(`key "${key.slice(0, 70)}" is not a valid metadata field name`);
      continue;
    }
    if (value === null) {
      if (allowNull) out[key] = null;
      else problems.push(`"${key}" must not be null`);
      continue;
    }
    const ok =
      typeof value === 'string' ||
      typeof value === 'boolean' ||
      (typeof value === 'number' && Number.isFinite(value)) ||
      (Array.isArray(value) && value.every((x) => typeof x === 'string'));
    if (!ok) {
      problems.push(`"${key}" must be a string, number, boolean or array of strings`);
      continue;
    }
    const v = value as MetadataValue;
    if (typeof v === 'string' && v.length > 1024) {
      problems.push(`"${key}" is longer than 1024 characters`);
      continue;
    }
    if (STRING_KEYS.includes(key) && typeof v !== 'string') {
      problems.push(`"${key}" must be a string`);
      continue;
    }
    const rule = RULES[key];
    const problem = rule ? rule(v) : null;
    if (problem) problems.push(`"${key}" ${problem}`);
    else out[key] = v;
  }
  if (problems.length > 0)
    throw badRequest('invalid_metadata', `invalid metadata: ${problems.join('; ')}`, { problems });
  return out;
}

/** Contract: "Metadata supplied through the API overwrites conflicting values from DICOM tags or a sidecar." */
export function mergeMetadata(fromStudy: Metadata, fromApi: Metadata): Metadata {
  return { ...fromStudy, ...fromApi };
}

export function productsOf(metadata: Metadata): string[] {
  const p = metadata.products;
  return Array.isArray(p) && p.length > 0 ? [...p] : [...DEFAULT_PRODUCTS];
}

export function sameProducts(a: string[], b: string[]): boolean {
  const sa = [...new Set(a)].sort();
  const sb = [...new Set(b)].sort();
  return sa.length === sb.length && sa.every((x, i) => x === sb[i]);
}

export function outcomeOf(metadata: Metadata): SandboxOutcome {
  const v = metadata.sandbox_outcome;
  return isSandboxOutcome(v) ? v : 'delivered';
}

/** Keys a JSON sidecar may carry besides our own snake_case keys (BIDS / DICOM keyword style). */
const SIDECAR_ALIASES: Record<string, string> = {
  PatientID: 'patient_id',
  PatientName: 'patient_name',
  PatientBirthDate: 'patient_birth_date',
  PatientSex: 'patient_sex',
  AccessionNumber: 'accession_number',
  StudyInstanceUID: 'study_uid',
  Modality: 'modality',
  ReferringPhysicianName: 'referring_physician',
  InstitutionName: 'institution_name',
};

/** Turns a parsed sidecar into metadata; values of the wrong type are reported, not silently kept. */
export function metadataFromSidecar(sidecar: Record<string, unknown>): {
  metadata: Metadata;
  problems: string[];
} {
  const picked: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(sidecar)) {
    const target = SIDECAR_ALIASES[key] ?? key;
    if (target === key && !(STRING_KEYS.includes(key) || key in RULES)) continue; // acquisition fields etc.
    picked[target] = value;
  }
  try {
    const v = validateMetadata(picked, false);
    return { metadata: v as Metadata, problems: [] };
  } catch (err) {
    return { metadata: {}, problems: [(err as Error).message] };
  }
}
