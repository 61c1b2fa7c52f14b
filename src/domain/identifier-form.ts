import type { AssigningAuthority, Identifier, MappedField, OrderRequest } from './order-request';
import type { PatientEvent } from './patient-event';

/**
 * The one form an identifier is held, compared and looked up in: Unicode NFC (composed).
 *
 * Canonically equivalent text is the same characters (Unicode §3.7, conformance C6): `É` as
 * U+00C9 and as `E` + U+0301 are one letter, written so by different writers (macOS and many
 * engines decompose; an ISO 8859-x RIS, a DICOM ISO_IR 100 modality and most keyboards
 * compose). Compared code point by code point, a cancel written decomposed did not find the
 * order its NW made composed. RFC 5198 (Unicode for network interchange) asks for NFC, and
 * NFC is what the other side usually holds, so every identifier is composed once, where it
 * enters the order model (the intake, for every transport) and wherever a value is a lookup
 * key (a FHIR search, a DICOM instance's Accession Number and Patient ID). The raw message
 * keeps the sender's bytes; values we write out (ACK, results, DICOM) carry the NFC form.
 *
 * Not NFKC: compatibility forms are different characters that only look alike or mean alike
 * (full-width `ＡＣＣ１２３` and `ACC123`, `ℌ` and `H`, the ligature `ﬁ` and `fi`, superscript
 * `²` and `2`). An identifier is a key another system assigned, not text to be read: which
 * characters it has is its identity, and folding them would make two numbers a RIS or a PACS
 * keeps apart one (the same rule as for case, whitespace and leading zeros, which are never
 * folded either; studies/study-identity.ts).
 */
export function composedIdentifier(value: string): string;
export function composedIdentifier(value: string | undefined): string | undefined;
export function composedIdentifier(value: string | null | undefined): string | null | undefined;
export function composedIdentifier(value: string | null | undefined): string | null | undefined {
  return typeof value === 'string' ? value.normalize('NFC') : value;
}

/** Whether two identifier texts (values, systems) are the same identifier: equal once composed. */
export function sameIdentifierText(a: string | undefined, b: string | undefined): boolean {
  if (a === b) return true;
  return (
    typeof a === 'string' && typeof b === 'string' && a.normalize('NFC') === b.normalize('NFC')
  );
}

function composedId<T extends Identifier | undefined>(id: T): T {
  if (!id || typeof id !== 'object') return id;
  const value = composedIdentifier(id.value);
  const system = composedIdentifier(id.system);
  if (value === id.value && system === id.system) return id;
  return { ...id, value, ...(system === undefined ? {} : { system }) };
}

function composedAuthority(a: AssigningAuthority | undefined): AssigningAuthority | undefined {
  if (!a || typeof a !== 'object') return a;
  const out: AssigningAuthority = { ...a };
  for (const part of ['namespace', 'universalId', 'universalIdType'] as const)
    if (typeof a[part] === 'string') out[part] = composedIdentifier(a[part]);
  return out;
}

/** An order with its identifiers in NFC (patient, placer, filler, group, accession and issuers). */
export function withComposedIdentifiers(request: OrderRequest): OrderRequest {
  const patient = request.patient
    ? {
        ...request.patient,
        identifiers: Array.isArray(request.patient.identifiers)
          ? request.patient.identifiers.map(composedId)
          : request.patient.identifiers,
      }
    : request.patient;
  return {
    ...request,
    patient,
    ...(request.placerOrderNumber
      ? { placerOrderNumber: composedId(request.placerOrderNumber) }
      : {}),
    ...(request.fillerOrderNumber
      ? { fillerOrderNumber: composedId(request.fillerOrderNumber) }
      : {}),
    ...(request.placerGroupNumber
      ? { placerGroupNumber: composedId(request.placerGroupNumber) }
      : {}),
    ...(typeof request.accessionNumber === 'string'
      ? { accessionNumber: composedIdentifier(request.accessionNumber) }
      : {}),
    ...(request.accessionIssuer
      ? { accessionIssuer: composedAuthority(request.accessionIssuer) }
      : {}),
  };
}

/** A patient event with its identifiers (the patient's, the merged ones) in NFC. */
export function eventWithComposedIdentifiers(event: PatientEvent): PatientEvent {
  const patient = {
    ...event.patient,
    identifiers: Array.isArray(event.patient?.identifiers)
      ? event.patient.identifiers.map(composedId)
      : event.patient?.identifiers,
  };
  return event.kind === 'patient-merge'
    ? {
        ...event,
        patient,
        lineage: composedLineage(event.lineage),
        priorIdentifiers: event.priorIdentifiers.map(composedId),
      }
    : { ...event, patient, lineage: composedLineage(event.lineage) };
}

/** The lineage targets that hold identifiers (their `value` is the value as stored: NFC). */
const IDENTIFIER_TARGET =
  /^(patient\.identifiers\[\d+\]\.(value|system)|priorIdentifiers\[\d+\]\.(value|system)|(placerOrderNumber|fillerOrderNumber|placerGroupNumber)\.(value|system)|accessionNumber|accessionIssuer\.\w+)$/;

/** The lineage with its identifier values as the order holds them (NFC). */
export function composedLineage(lineage: MappedField[]): MappedField[] {
  if (!Array.isArray(lineage)) return lineage;
  return lineage.map((l) =>
    IDENTIFIER_TARGET.test(l.target) && typeof l.value === 'string'
      ? { ...l, value: composedIdentifier(l.value) }
      : l,
  );
}
