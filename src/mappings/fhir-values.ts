/**
 * Values we write into FHIR R4 resources, made valid for their type whatever the order or the
 * upstream held (DESIGN.md §5). A DiagnosticReport the structure validator refuses is never
 * sent (the outbox dead-letters it), so one control character in the upstream's impression or
 * a structure name would have kept the whole result from the EHR.
 */

/**
 * R4 `string` (datatypes.html#string; json.html): Unicode without control characters other
 * than TAB, LF and CR, and whole code points. Anything else becomes U+FFFD, as at intake.
 */
const NOT_FHIR_STRING =
  // eslint-disable-next-line no-control-regex -- matching control characters is the point
  /[\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

export function fhirString(text: string): string {
  return text.replace(NOT_FHIR_STRING, '\uFFFD');
}

/**
 * R4 `code` (datatypes.html#code, `[^\s]+( [^\s]+)*`): trimmed, inner whitespace one space;
 * undefined when nothing is left (the element is then left out, never written empty).
 */
export function fhirCode(code: string | undefined): string | undefined {
  if (code === undefined) return undefined;
  const text = fhirString(code).trim().replace(/\s+/g, ' ');
  return text === '' ? undefined : text;
}

/**
 * R4 `uri` (`\S*`): an HL7 namespace id used as an identifier system (`RADIS 1`) has its
 * whitespace percent-encoded (RFC 3986) rather than the resource refused.
 */
export function fhirUri(uri: string | undefined): string | undefined {
  if (uri === undefined) return undefined;
  const text = fhirString(uri)
    .trim()
    .replace(/\s/g, (c) => encodeURIComponent(c));
  return text === '' ? undefined : text;
}

/**
 * An R4 `string` that must say something: the validator refuses one of only whitespace
 * (json.html: a value has non-whitespace content), which an HL7 order can carry (`PID-3` of
 * three spaces beside a real id, an `OBR-4` text of spaces). Undefined then, so the element is
 * left out (or the caller takes its fallback) rather than the resource dead-lettered.
 */
export function fhirText(text: string | undefined): string | undefined {
  if (text === undefined) return undefined;
  const value = fhirString(text);
  return value.trim() === '' ? undefined : value;
}

/**
 * An identifier's system as an R4 `uri`: an OID as `urn:oid:`, a UUID as `urn:uuid:`
 * (datatypes.html#uri, identifier-registry). An HL7 order names an assigning authority by
 * universal ID only (CX-4 `&1.2.250.1.999.1.1&ISO`, as IHE ITI profiles write it), which the
 * order model keeps bare: as the system, `1.2.250.1.999.1.1` matched no Patient of the EHR.
 * Anything else as `fhirUri`.
 */
export function fhirIdentifierSystem(system: string | undefined): string | undefined {
  const s = system?.trim();
  if (s && /^[0-2](\.(0|[1-9]\d*))+$/.test(s)) return `urn:oid:${s}`;
  if (s && /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(s))
    return `urn:uuid:${s.toLowerCase()}`;
  return fhirUri(system);
}
