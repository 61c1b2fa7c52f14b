/**
 * Code and identifier systems between FHIR and HL7 v2: one declared table, read both ways.
 *
 * - A FHIR terminology URI (R4 terminologies.html) and its HL7 table 0396 mnemonic: the FHIR
 *   front door matches product-table rows (`system: 'LN'`) with it, and an ORU^R01 for a FHIR
 *   order names the procedure's coding system with the mnemonic (OBR-4.3 is an ID of table
 *   0396: `http://loinc.org` there was no valid value).
 * - An identifier system as HL7 HD (table 0301 universal ID types): a FHIR `urn:oid:` system
 *   is an ISO universal ID, a `urn:uuid:` a UUID, any other URI a URI; a plain name (an HL7
 *   namespace the order came with) stays the namespace.
 */

/** FHIR code system URI → HL7 table 0396 mnemonic. */
export const FHIR_CODE_SYSTEMS_0396: Readonly<Record<string, string>> = {
  'http://loinc.org': 'LN',
  'http://snomed.info/sct': 'SCT',
  'http://www.ama-assn.org/go/cpt': 'C4',
  'http://radlex.org': 'RADLEX',
  'http://www.radlex.org': 'RADLEX',
  'http://hl7.org/fhir/sid/icd-10': 'I10',
  'http://hl7.org/fhir/sid/icd-10-cm': 'I10C',
  'http://hl7.org/fhir/sid/icd-9-cm': 'I9C',
  'http://dicom.nema.org/resources/ontology/DCM': 'DCM',
};

/** The same terminologies by their HL7 OIDs (a FHIR `urn:oid:` system, a CDA-derived one). */
export const CODE_SYSTEM_OIDS_0396: Readonly<Record<string, string>> = {
  '2.16.840.1.113883.6.1': 'LN',
  '2.16.840.1.113883.6.96': 'SCT',
  '2.16.840.1.113883.6.12': 'C4',
  '2.16.840.1.113883.6.256': 'RADLEX',
  '2.16.840.1.113883.6.3': 'I10',
  '2.16.840.1.113883.6.90': 'I10C',
  '2.16.840.1.113883.6.103': 'I9C',
  '1.2.840.10008.2.16.4': 'DCM',
};

/** Table 0396 `L`: a local code system, for a URI the table above does not know. */
export const LOCAL_CODE_SYSTEM_0396 = 'L';

const URI = /^[A-Za-z][A-Za-z0-9+.-]*:/;

function ownValue(table: Readonly<Record<string, string>>, key: string): string | undefined {
  return Object.hasOwn(table, key) ? table[key] : undefined;
}

/**
 * A coding's system as an HL7 CE/CWE-3 (table 0396): the mnemonic of a known FHIR URI or OID,
 * `L` for another URI, and a mnemonic the order came with over HL7 as it was sent.
 */
export function hl7CodingSystem(system: string | undefined): string | undefined {
  const s = system?.trim();
  if (!s) return undefined;
  // own keys only: a system `constructor` found Object's, a function taken for a mnemonic
  const known = ownValue(FHIR_CODE_SYSTEMS_0396, s.replace(/\/+$/, ''));
  if (known) return known;
  const oid = /^urn:oid:(.+)$/i.exec(s)?.[1];
  if (oid !== undefined) return ownValue(CODE_SYSTEM_OIDS_0396, oid) ?? LOCAL_CODE_SYSTEM_0396;
  return URI.test(s) ? LOCAL_CODE_SYSTEM_0396 : s;
}

/** The FHIR URI of an HL7 table 0396 mnemonic (`LN`, or a synonym resolved before). */
export function fhirCodeSystemOf(mnemonic: string | undefined): string | undefined {
  if (!mnemonic) return undefined;
  const m = mnemonic.trim().toUpperCase();
  return Object.entries(FHIR_CODE_SYSTEMS_0396).find(([, v]) => v === m)?.[0];
}

/**
 * An identifier system as the three parts of an HL7 HD (namespace ID, universal ID,
 * universal ID type, table 0301), for CX-4 and EI-2..4.
 */
export function hdOf(system: string | undefined): [string?, string?, string?] {
  const s = system?.trim();
  if (!s) return [];
  const oid = /^urn:oid:(.+)$/i.exec(s)?.[1];
  if (oid !== undefined) return [undefined, oid, 'ISO'];
  const uuid = /^urn:uuid:(.+)$/i.exec(s)?.[1];
  if (uuid !== undefined) return [undefined, uuid, 'UUID'];
  if (URI.test(s)) return [undefined, s, 'URI'];
  return [s];
}
