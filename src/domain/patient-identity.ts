import type { Identifier, PatientInfo } from './order-request';

/**
 * Which of a patient's identifiers is the one the order is known by: indexed and searched
 * (orders.patient_id), compared with the study's DICOM PatientID, sent upstream as `patient_id`,
 * written into our DICOM SR when the study carried none. Senders list PID-3 / Patient.identifier
 * in any order; a French RIS may put the NIR (`^^^INSEE^NH`) before its own `^^^HOSP^PI`, and
 * taking the first then matched the study against the national insurance number (never a
 * PACS's PatientID) and sent that number to the cloud.
 *
 * Types are HL7 table 0203 codes (CX-5, or FHIR v2-0203 `Identifier.type`); an untyped
 * identifier is judged by its system (NOT_A_RECORD_ID_SYSTEMS).
 */

/** Record numbers of this hospital, best first (`MRN` is not in table 0203 but widely sent). */
export const PATIENT_RECORD_ID_TYPES = ['MR', 'MRN', 'PI', 'PT', 'PN'] as const;

/**
 * Table 0203 types that identify the person outside the hospital's records (national,
 * insurance, document, account and visit numbers): never chosen while another identifier
 * is there. A type starting `NN` is a national person identifier (`NNFRA`, `NNGBR`, …).
 */
export const NOT_A_RECORD_ID_TYPES: ReadonlySet<string> = new Set([
  'SS', // social security number
  'SR', // state registry ID
  'NH', // national health plan identifier
  'NI', // national unique individual identifier
  'NPI', // national provider identifier
  'HC', // health card number
  'JHN', // jurisdictional health number
  'MC', // Medicare
  'MA', // Medicaid
  'MB', // member number
  'SN', // subscriber number
  'DL', // driver's license
  'PPN', // passport
  'CZ', // citizenship card
  'BR', // birth registry number
  'TAX', // tax ID
  'AN', // account number
  'VN', // visit number
  'BA', // bank account
  'BC', // bank card
]);

/**
 * Identifier systems (FHIR `Identifier.system`, HL7 CX-4 universal ID) of national person,
 * insurance and social security numbers, for senders that do not type them: a FHIR Patient
 * with an untyped `http://hl7.org/fhir/sid/us-ssn` first had the order known by the SSN.
 * OIDs are listed bare; `urn:oid:` is stripped before comparing.
 */
export const NOT_A_RECORD_ID_SYSTEMS: ReadonlySet<string> = new Set([
  'http://hl7.org/fhir/sid/us-ssn', // US social security number
  '2.16.840.1.113883.4.1', // US SSN (OID)
  'http://hl7.org/fhir/sid/us-medicare', // US Medicare number
  'http://hl7.org/fhir/sid/us-mbi', // US Medicare beneficiary identifier
  '1.2.250.1.213.1.4.8', // FR INS-NIR
  '1.2.250.1.213.1.4.9', // FR INS-NIA
  '1.2.250.1.213.1.4.10', // FR INS-NIR (test)
  '1.2.250.1.213.1.4.11', // FR INS-NIA (test)
  'http://fhir.de/sid/gkv/kvid-10', // DE health insurance number
  'http://fhir.nl/fhir/namingsystem/bsn', // NL citizen service number
  'http://fhir.nhs.uk/id/nhs-number', // UK NHS number
]);

function notARecordId(id: Identifier): boolean {
  const system = id.system?.toLowerCase().replace(/^urn:oid:/, '');
  if (system !== undefined && NOT_A_RECORD_ID_SYSTEMS.has(system)) return true;
  if (id.type === undefined) return false;
  const t = id.type.toUpperCase();
  return NOT_A_RECORD_ID_TYPES.has(t) || /^NN[A-Z]{3}$/.test(t);
}

/**
 * The identifier the order is known by: the first of the record types in their order of
 * preference, else the first identifier that is not a national/insurance/document number,
 * else the first.
 */
export function primaryIdentifier(patient: PatientInfo | undefined): Identifier | undefined {
  const ids = patient?.identifiers ?? [];
  for (const type of PATIENT_RECORD_ID_TYPES) {
    const hit = ids.find((i) => i.type?.toUpperCase() === type);
    if (hit) return hit;
  }
  return ids.find((i) => !notARecordId(i)) ?? ids[0];
}

/** An assigning authority as compared: case, surrounding space and `urn:oid:` aside. */
function authorityKey(system: string): string {
  return system
    .trim()
    .toLowerCase()
    .replace(/^urn:oid:/, '');
}

/**
 * Whether `named` (the PID-3 / MRG-1 of a patient message) names the record `record` (the
 * identifier an order is known by): the same number, and the same assigning authority when
 * both say one. Record numbers are only unique within their authority: two facilities of one
 * network each have a patient `4711`, and an ADT^A08 or A40 from one of them must not rename
 * or move the other's orders.
 */
export function namesRecord(named: readonly Identifier[], record: Identifier | undefined): boolean {
  if (record === undefined) return false;
  return named.some(
    (id) =>
      id.value === record.value &&
      (id.system === undefined ||
        record.system === undefined ||
        authorityKey(id.system) === authorityKey(record.system)),
  );
}

/**
 * Whether a message names another patient than the order it found: the record numbers the
 * order and the message are known by (primaryIdentifier) differ, in value or, when both carry
 * one, in assigning authority. The order is found by the sender's order number alone; a
 * patient is moved by ADT (A40 merge), never by an order message, so a different patient means
 * the number points at someone else's order (a reused or mistyped number), and changing,
 * cancelling or answering for it would act on the wrong patient. No identifier on either side:
 * nothing to compare.
 */
export function namesAnotherPatient(
  asked: PatientInfo | undefined,
  order: PatientInfo | undefined,
  retired: readonly Identifier[] = [],
): boolean {
  const a = primaryIdentifier(asked);
  const o = primaryIdentifier(order);
  if (!a || !o) return false;
  const differs =
    a.value !== o.value ||
    (a.system !== undefined && o.system !== undefined && a.system !== o.system);
  if (!differs) return false;
  // The order of PID-3 repetitions (Patient.identifier) carries no meaning: a sender that lists
  // the patient's other facility's record number first in a later message names the same
  // patient, whose order holds that number too. Before, only the first record numbers were
  // compared, and such a change or cancel was refused as naming another patient.
  // A record number an ADT^A40 merged into the order's patient (`retired`, MRG-1) names that
  // patient too: a RIS that has not applied the merge yet changes or cancels the order under
  // it. Before, such a cancel was AE 204 "merge patients by ADT^A40", though that merge was
  // what had happened, and the exam the RIS called off went on being analysed.
  return (
    !namesRecord(order?.identifiers ?? [], a) &&
    !namesRecord(asked?.identifiers ?? [], o) &&
    !retired.some((r) => namesRecord(asked?.identifiers ?? [], r))
  );
}

/** The same identifier: the same number, and the same assigning authority when both say one. */
function sameIdentifier(a: Identifier, b: Identifier): boolean {
  return namesRecord([a], b);
}

/**
 * A patient's identifiers after a merge (HL7 ADT^A40, v2.5.1 §3.3.40 and §3.6.2.1.2): the
 * identifiers MRG-1 retires are replaced by the surviving ones (PID-3), and every other
 * identifier the order holds stays. An MPI's A40 names its own numbers only; the order also
 * carries the partner facility's record number, the SSN or the national number from the RIS's
 * PID-3, and replacing them all by the A40's PID-3 lost them (the upstream's patient and our
 * DICOM SR then knew only the merging authority's number). The surviving identifiers come
 * first, so the record number the order is known by is the surviving one.
 */
export function mergedIdentifiers(
  current: readonly Identifier[],
  retired: readonly Identifier[],
  surviving: readonly Identifier[],
): Identifier[] {
  const kept = current.filter(
    (id) =>
      !retired.some((r) => sameIdentifier(r, id)) && !surviving.some((s) => sameIdentifier(s, id)),
  );
  return [...surviving, ...kept];
}

/**
 * Of the identifiers an order holds, those a merge retires (MRG-1): the order's patient was
 * known by them until the merge, and what was sent before it (the upstream's create, the
 * study's Patient ID in the PACS) still names them. Kept beside the order
 * (`orders.retired_patient_identifiers`) so a report naming the record number the order had
 * when it was placed is recognised as this patient's, never another's.
 */
export function retiredOf(
  current: readonly Identifier[],
  retired: readonly Identifier[],
): Identifier[] {
  return current.filter((id) => retired.some((r) => sameIdentifier(r, id)));
}
