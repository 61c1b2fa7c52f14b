/**
 * Patient identity is verified, never assumed (DESIGN.md §5, issue #15): a study is used for
 * an order only when its identifiers match the order's exactly. Pure rules, used on every
 * path a study reaches us by: QIDO-RS answers, retrieved (WADO-RS) instances, and instances
 * pushed to us (STOW-RS, C-STORE).
 */

/** Identifiers a site can require to match (STUDY_IDENTITY_MATCH). */
export const IDENTITY_FIELDS = ['accession-number', 'patient-id'] as const;
export type IdentityField = (typeof IDENTITY_FIELDS)[number];

export interface IdentityValues {
  accessionNumber?: string | null;
  patientId?: string | null;
}

export interface IdentityMismatch {
  field: IdentityField;
  /** Masked (first and last character kept): the audit log names what differed, not the PHI. */
  order: string;
  study: string;
  /** Set when the values differ only by case, whitespace/control characters or leading zeros. */
  nearMiss?: 'case' | 'whitespace-or-control' | 'leading-zeros';
}

import { nearMiss, withoutPadding } from '../mappings/dicom-identifiers';
export { hasMatchingCharacters } from '../mappings/dicom-identifiers';

/**
 * What differs between an order and a study's identifiers. SH/LO values are compared after
 * removing their insignificant leading and trailing spaces (PS3.5 §6.2; `withoutPadding`),
 * otherwise exactly: case, other whitespace, control characters and leading zeros count.
 * The accession number must match whenever the order has one (a study without one does not
 * match); the patient ID when both carry one (RIS and PACS do not always share an ID domain:
 * a site that cannot rely on it leaves `patient-id` out of the rule).
 */
export function identityMismatches(
  order: IdentityValues,
  study: IdentityValues,
  required: readonly IdentityField[],
): IdentityMismatch[] {
  const out: IdentityMismatch[] = [];
  const o = { accession: norm(order.accessionNumber), patient: norm(order.patientId) };
  const s = { accession: norm(study.accessionNumber), patient: norm(study.patientId) };
  if (required.includes('accession-number') && o.accession !== undefined) {
    if (s.accession !== o.accession)
      out.push(mismatch('accession-number', o.accession, s.accession));
  }
  if (required.includes('patient-id') && o.patient !== undefined && s.patient !== undefined) {
    if (s.patient !== o.patient) out.push(mismatch('patient-id', o.patient, s.patient));
  }
  return out;
}

/** One line for a timeline: which fields differed, masked. */
export function describeMismatches(mismatches: readonly IdentityMismatch[]): string {
  return mismatches
    .map(
      (m) =>
        `${m.field} (order ${m.order}, study ${m.study}${m.nearMiss ? `; differ only by ${m.nearMiss}` : ''})`,
    )
    .join(', ');
}

function mismatch(
  field: IdentityField,
  order: string,
  study: string | undefined,
): IdentityMismatch {
  const near = study === undefined ? undefined : nearMiss(order, study);
  return {
    field,
    order: mask(order),
    study: mask(study),
    ...(near ? { nearMiss: near } : {}),
  };
}

function norm(value: string | null | undefined): string | undefined {
  const v = value == null ? undefined : withoutPadding(value);
  return v ? v : undefined;
}

function mask(value: string | undefined): string {
  if (value === undefined) return '(none)';
  if (value.length <= 2) return '*'.repeat(value.length);
  return `${value[0]}${'*'.repeat(Math.min(value.length - 2, 8))}${value[value.length - 1]}`;
}
