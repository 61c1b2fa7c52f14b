/**
 * Patient identity is verified, never assumed (DESIGN.md §5, issue #15): a study is used for
 * an order only when its identifiers match the order's exactly. Pure rules, used on every
 * path a study reaches us by: QIDO-RS answers, retrieved (WADO-RS) instances, and instances
 * pushed to us (STOW-RS, C-STORE).
 */

/** Identifiers a site can require to match (STUDY_IDENTITY_MATCH). */
export const IDENTITY_FIELDS = [
  'accession-number',
  'accession-issuer',
  'patient-id',
  'patient-id-issuer',
] as const;
export type IdentityField = (typeof IDENTITY_FIELDS)[number];

export interface IdentityValues {
  accessionNumber?: string | null;
  patientId?: string | null;
  /** The order's: HL7 CX-4 (namespace, else universal ID) or FHIR Identifier.system. */
  patientIdIssuer?: string | null;
  /** The study's: Issuer of Patient ID (0010,0021). */
  issuerOfPatientId?: string | null;
  /** The order's: who issued its accession (HL7 IPC-1 EI components, FHIR system/assigner). */
  accessionIssuer?: AssigningAuthority | null;
  /** The study's: Issuer of Accession Number Sequence (0008,0051), first item. */
  issuerOfAccessionNumber?: AssigningAuthority | null;
  /**
   * The order's: record numbers an ADT^A40 merged into its patient (MRG-1), each with its
   * assigning authority. Images acquired before the merge (the worklist entry of then), and a
   * PACS that has not applied it, carry them.
   */
  retiredPatientIds?: ReadonlyArray<{ value: string; issuer?: string | null }> | null;
}

export interface IdentityMismatch {
  field: IdentityField;
  /** Masked (first and last character kept): the audit log names what differed, not the PHI. */
  order: string;
  study: string;
  /** Set when the values differ only by case, whitespace/control characters or leading zeros. */
  nearMiss?: 'case' | 'whitespace-or-control' | 'leading-zeros';
}

import { composedIdentifier } from '../domain/identifier-form';
import type { AssigningAuthority } from '../domain/order-request';
import { nearMiss, withoutPadding } from '../mappings/dicom-identifiers';
export { hasMatchingCharacters } from '../mappings/dicom-identifiers';

/**
 * What differs between an order and a study's identifiers. SH/LO values are compared after
 * removing their insignificant leading and trailing spaces (PS3.5 §6.2; `withoutPadding`),
 * otherwise exactly: case, other whitespace, control characters and leading zeros count.
 * The accession number must match whenever the order has one (a study without one does not
 * match); the patient ID when both carry one (RIS and PACS do not always share an ID domain:
 * a site that cannot rely on it leaves `patient-id` out of the rule).
 *
 * The same Patient ID in two ID domains is two patients (a PACS shared by hospitals whose
 * record numbers overlap; IHE PIX): when the patient IDs are compared, both sides name the
 * domain (the order's assigning authority, the study's Issuer of Patient ID) and the names
 * differ, the study is not the order's (`patient-id-issuer`). The names are compared
 * without case, padding or a `urn:oid:` prefix; a site whose RIS and PACS spell one domain
 * differently leaves `patient-id-issuer` out of the rule.
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
    else if (required.includes('accession-issuer')) {
      const differs = authorityMismatch(order.accessionIssuer, study.issuerOfAccessionNumber);
      if (differs) out.push({ field: 'accession-issuer', ...differs });
    }
  }
  if (required.includes('patient-id') && o.patient !== undefined && s.patient !== undefined) {
    // The order's record number, else one a merge retired into it (the same patient, in the
    // retired number's own ID domain): a study acquired before an ADT^A40 is the order's.
    const named =
      s.patient === o.patient
        ? { issuer: order.patientIdIssuer }
        : (order.retiredPatientIds ?? []).find((r) => norm(r.value) === s.patient);
    if (!named) out.push(mismatch('patient-id', o.patient, s.patient));
    else if (required.includes('patient-id-issuer')) {
      const oi = issuer(named.issuer);
      const si = issuer(study.issuerOfPatientId);
      // an issuer is no PHI: named in full, so the analyst sees which domains differ
      if (oi !== undefined && si !== undefined && oi.kind === si.kind && oi.key !== si.key)
        out.push({ field: 'patient-id-issuer', order: oi.shown, study: si.shown });
    }
  }
  return out;
}

/**
 * Whether two assigning authorities (HL7 EI / HD, DICOM's HL7v2 Hierarchic Designator Macro)
 * name different issuers: the universal IDs are compared when both sides have one, else the
 * local namespaces when both have one, each as `issuer()` compares names (case, padding and
 * `urn:oid:` aside, only names of one kind). A side without an issuer, or two sides naming
 * the issuer by different parts, is no mismatch: the accession then counts alone, as before.
 * The same accession number of another issuing authority (a PACS shared by hospitals whose
 * RIS number exams alike) is another exam.
 */
export function authorityMismatch(
  order: AssigningAuthority | null | undefined,
  study: AssigningAuthority | null | undefined,
): { order: string; study: string } | undefined {
  if (!order || !study) return undefined;
  for (const part of ['universalId', 'namespace'] as const) {
    const o = issuer(order[part]);
    const s = issuer(study[part]);
    if (o === undefined || s === undefined || o.kind !== s.kind) continue;
    return o.key === s.key ? undefined : { order: o.shown, study: s.shown };
  }
  return undefined;
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

/**
 * Padding removed and composed (NFC): canonically equivalent text is the same characters
 * (Unicode §3.7), whatever code points a writer chose. A RIS or engine writing decomposed
 * (`O` + U+0308, as macOS does) and a modality given the worklist in ISO 8859-1, which has only
 * the composed `Ö`, wrote the same accession: compared code point by code point, the order's
 * own study was refused as another's. Letters that differ (`Ö`, `Ó`, `O`) still differ.
 */
function norm(value: string | null | undefined): string | undefined {
  const v = value == null ? undefined : composedIdentifier(withoutPadding(value));
  return v ? v : undefined;
}

/**
 * An ID domain's name as written (`shown`, bounded), as compared (`key`) and its kind: an OID
 * (bare or `urn:oid:`), another URI (a FHIR system such as `http://hospital.example/mrn`), or
 * a name (HL7 HD namespace, the usual Issuer of Patient ID). Only names of one kind are
 * compared: a FHIR system URL and a PACS's `HOSPA`, or a namespace and an OID, are two ways
 * of naming domains that cannot be told apart by their spelling, and refusing on them would
 * fail good orders.
 */
function issuer(
  value: string | null | undefined,
): { key: string; shown: string; kind: 'oid' | 'uri' | 'name' } | undefined {
  const v = norm(value);
  if (v === undefined) return undefined;
  const key = v.replace(/^urn:oid:/i, '').toUpperCase();
  if (key === '') return undefined;
  // Several values (VM 1, but written so) are compared whole, as accession and Patient ID
  // are, and are of the kind of their first: `1.2.3\1.2.4` is not the OID 1.2.3.
  const first = key.split('\\')[0]!;
  const kind = /^[0-2](\.\d+)+$/.test(first)
    ? 'oid'
    : /^[A-Z][A-Z0-9+.-]*:/.test(first)
      ? 'uri'
      : 'name';
  return { key, kind, shown: printable(v.length > 64 ? `${v.slice(0, 64)}…` : v) };
}

function mask(value: string | undefined): string {
  if (value === undefined) return '(none)';
  if (value.length <= 2) return '*'.repeat(value.length);
  return printable(
    `${value[0]}${'*'.repeat(Math.min(value.length - 2, 8))}${value[value.length - 1]}`,
  );
}

/**
 * What goes into the audit entry (jsonb): control characters as `?`, a lone surrogate (a
 * PACS's JSON can hold `\ud800`) as U+FFFD. PostgreSQL refuses a NUL or a lone surrogate in
 * jsonb; the mismatch was then never recorded and the acquisition failed with an exception.
 */
function printable(value: string): string {
  return value.replace(
    // eslint-disable-next-line no-control-regex
    /[\u0000-\u001f\u007f]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g,
    (c) => (c.length === 1 && c.charCodeAt(0) < 0xd800 ? '?' : '\ufffd'),
  );
}
