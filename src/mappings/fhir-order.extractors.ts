import {
  CONTROL_CHARACTERS_MESSAGE,
  hasControlCharacters,
  hasMatchingCharacters,
  MATCHING_CHARACTERS_MESSAGE,
} from './dicom-identifiers';
import type { CodeableConcept } from '@medplum/fhirtypes';
import type {
  AdministrativeSex,
  CodedConcept,
  Identifier,
  OrderPriority,
  Practitioner as OrderPractitioner,
  ToleratedQuirk,
} from '../domain/order-request';
import {
  accessionIssuerOf,
  accessionOf,
  codedFrom,
  codingKey,
  currentName,
  DICOM_UID_SYSTEM,
  EMPTY,
  identifierLines,
  nameFromDisplay,
  nameLines,
  pickProcedureCoding,
  readFrom,
  referencedType,
  referenceOf,
  placerIdentifierOf,
  srIdentifier,
  toIdentifier,
  identifierValue,
  toPersonName,
  typeFromText,
  type Extracted,
  type Scope,
} from './fhir-order.extract-helpers';
import type { ExtractorId } from './fhir-order.mapping';
import { productLineage, resolveProducts } from './product-table';
import type { LineageLine } from './table-driver';

/** A coding as an analyst reads it: `system|code`, saying what is missing (a display-only coding). */
function codingText(c: { system?: string; code?: string; display?: string }): string {
  const text = `${c.system ?? '(no system)'}|${c.code ?? '(no code)'}`;
  return c.display ? `${text} "${c.display}"` : text;
}

/** One extractor per ExtractorId of FHIR_ORDER_FIELD_MAP (R4 clauses in the table rows). */
export const EXTRACTORS: Record<ExtractorId, (s: Scope) => Extracted> = {
  'patient-identifiers': ({ ctx }) => {
    const p = ctx.patient;
    if (!p) return EMPTY;
    const lines: LineageLine[] = [];
    const ids: Identifier[] = [];
    const quirks: ToleratedQuirk[] = [];
    (p.resource.identifier ?? []).forEach((raw, i) => {
      const id = toIdentifier(raw);
      if (!id) return;
      lines.push(...identifierLines(`[${ids.length}]`, id, `${p.source} Patient.identifier[${i}]`));
      ids.push(id);
      const fromText = typeFromText(raw);
      if (fromText)
        quirks.push({
          code: 'fhir-identifier-type-text',
          detail: `Patient.identifier[${i}].type has no coding; its text is read as v2-0203 ${fromText}`,
        });
    });
    return ids.length ? { value: ids, lines, ...(quirks.length ? { quirks } : {}) } : EMPTY;
  },
  'patient-name': ({ ctx }) => {
    const p = ctx.patient;
    const picked = currentName(p?.resource.name);
    if (!p || !picked) return EMPTY;
    const name = toPersonName(picked.name);
    const quirks: ToleratedQuirk[] =
      picked.index > 0
        ? [
            {
              code: 'fhir-name-not-first',
              detail: `Patient.name[${picked.index}] used: earlier names are old or ended`,
            },
          ]
        : [];
    return {
      value: name,
      lines: nameLines('', name, `${p.source} Patient.name[${picked.index}]`),
      quirks,
    };
  },
  'patient-birth-date': ({ ctx }) => {
    const b = ctx.patient?.resource.birthDate;
    return b ? readFrom(b, `${ctx.patient!.source} Patient.birthDate`) : EMPTY;
  },
  'patient-gender': ({ ctx }) => {
    // R4 administrative-gender and our AdministrativeSex share their four codes.
    const g = ctx.patient?.resource.gender;
    if (!g) return EMPTY;
    const sex: AdministrativeSex = g;
    return readFrom(sex, `${ctx.patient!.source} Patient.gender`);
  },
  'placer-identifier': ({ sr }) => {
    // Only an untyped identifier stands in for a missing PLAC: one typed otherwise (v2-0203
    // VN, the visit number an HL7v2-to-FHIR converter puts first, MR, or a local type) is not
    // the order's number; taken as the placer, every order of one visit was the first one's
    // (the second answered 200).
    const found = placerIdentifierOf(sr);
    const quirks: ToleratedQuirk[] = [];
    if (found?.untyped) {
      quirks.push({
        code: 'fhir-placer-untyped',
        detail: `ServiceRequest.identifier[${found.index}] has no type (no PLAC identifier); used as placer number`,
      });
    }
    if (!found) return EMPTY;
    const id = toIdentifier(found.id)!;
    return {
      value: id,
      lines: identifierLines('', id, `ServiceRequest.identifier[${found.index}]`),
      quirks,
    };
  },
  'filler-identifier': ({ sr }) => {
    const found = srIdentifier(sr, 'FILL');
    if (!found) return EMPTY;
    const id = toIdentifier(found.id)!;
    return {
      value: id,
      lines: identifierLines('', id, `ServiceRequest.identifier[${found.index}]`),
    };
  },
  'accession-issuer': (scope) => accessionIssuerOf(scope),
  accession: (scope) => {
    // An accession with DICOM matching characters would query other patients' studies; one
    // with a control character (a scanner's TAB) can equal no study's Accession Number (SH).
    const out = accessionOf(scope);
    const why =
      typeof out.value !== 'string'
        ? undefined
        : hasMatchingCharacters(out.value)
          ? MATCHING_CHARACTERS_MESSAGE
          : hasControlCharacters(out.value)
            ? CONTROL_CHARACTERS_MESSAGE
            : undefined;
    if (why) {
      const at = out.lines[0]?.source ?? 'ServiceRequest.identifier';
      return {
        value: undefined,
        lines: [],
        issues: [
          {
            severity: 'error',
            code: 'value',
            expression: at.includes(' ') ? 'ServiceRequest.supportingInfo' : at,
            diagnostics: `${at}: ${why}`,
          },
        ],
      };
    }
    return out;
  },
  requisition: ({ sr }) => {
    const id = sr.requisition ? toIdentifier(sr.requisition) : undefined;
    return id ? { value: id, lines: identifierLines('', id, 'ServiceRequest.requisition') } : EMPTY;
  },
  procedure: ({ sr, config }) => {
    if (!sr.code) return EMPTY;
    const picked = pickProcedureCoding(sr.code, config);
    const coded = codedFrom(sr.code, picked.coding);
    if (!coded.code && !coded.display) return EMPTY;
    const source = picked.coding
      ? `ServiceRequest.code.coding[${picked.index}]`
      : 'ServiceRequest.code.text';
    const lines: LineageLine[] = [];
    if (coded.code) lines.push({ suffix: '.code', source: `${source}.code`, value: coded.code });
    if (coded.system)
      lines.push({ suffix: '.system', source: `${source}.system`, value: coded.system });
    if (coded.display)
      lines.push({ suffix: '.display', source: `${source}.display`, value: coded.display });
    return { value: coded, lines };
  },
  modality: ({ ctx }) => {
    for (const study of ctx.imagingStudies) {
      const direct = study.resource.modality?.find((m) => m.code);
      if (direct?.code) return readFrom(direct.code, `${study.source} ImagingStudy.modality`);
      const index = (study.resource.series ?? []).findIndex((s) => s.modality?.code);
      if (index >= 0) {
        const code = study.resource.series![index]!.modality.code!;
        return readFrom(code, `${study.source} ImagingStudy.series[${index}].modality`);
      }
    }
    return EMPTY;
  },
  'study-uid': ({ ctx }) => {
    for (const study of ctx.imagingStudies) {
      const ids = study.resource.identifier ?? [];
      const index = ids.findIndex((i) => i.system === DICOM_UID_SYSTEM && i.value);
      if (index < 0) continue;
      const raw = ids[index]!.value!;
      const quirks: ToleratedQuirk[] = [];
      // R4 imagingstudy.html: the Study Instance UID is an identifier with system urn:dicom:uid
      // and the UID as a urn:oid: URI. Some servers send the bare UID: tolerated.
      let uid = raw;
      if (raw.startsWith('urn:oid:')) uid = raw.slice('urn:oid:'.length);
      else
        quirks.push({
          code: 'fhir-dicom-uid-bare',
          detail: `${study.source} ImagingStudy.identifier[${index}] lacks the urn:oid: prefix`,
        });
      if (!/^[0-9]+(\.[0-9]+)*$/.test(uid) || uid.length > 64) {
        return {
          lines: [],
          issues: [
            {
              severity: 'error',
              code: 'value',
              expression: `${study.path ?? 'ImagingStudy'}.identifier[${index}].value`,
              diagnostics:
                'not a DICOM UID (digits and dots, at most 64 characters; DICOM PS3.5 §9.1)',
            },
          ],
        };
      }
      return readFrom(uid, `${study.source} ImagingStudy.identifier[${index}].value`, quirks);
    }
    return EMPTY;
  },
  priority: ({ sr }) => {
    // R4 request-priority and our OrderPriority share their four codes.
    if (!sr.priority) return EMPTY;
    const p: OrderPriority = sr.priority;
    return readFrom(p, 'ServiceRequest.priority');
  },
  requester: ({ sr, ctx }) => {
    if (!sr.requester) return EMPTY;
    // R4 ServiceRequest.requester may be an Organization, a Device, the Patient or a
    // RelatedPerson: none is the ordering provider (a person, HL7 ORC-12 XCN). Their display
    // ("Radiology Department", "Stroke AI triage") was split into a person's name and went out
    // as the referring physician "Department^Radiology".
    const kind = ctx.requesterType ?? referencedType(sr.requester);
    if (kind && kind !== 'Practitioner' && kind !== 'PractitionerRole') {
      return {
        lines: [],
        quirks: [
          {
            code: 'fhir-requester-not-a-practitioner',
            detail: `ServiceRequest.requester is a ${kind}: no ordering provider`,
          },
        ],
      };
    }
    const out: OrderPractitioner = {};
    const lines: LineageLine[] = [];
    const quirks: ToleratedQuirk[] = [];
    const resolved = ctx.requester;
    if (resolved?.resource.resourceType === 'Practitioner') {
      const p = resolved.resource;
      const idIndex = (p.identifier ?? []).findIndex((i) => identifierValue(i) !== undefined);
      if (idIndex >= 0) {
        out.identifier = toIdentifier(p.identifier![idIndex]!);
        lines.push(
          ...identifierLines(
            '.identifier',
            out.identifier!,
            `${resolved.source} Practitioner.identifier[${idIndex}]`,
          ),
        );
      }
      const picked = currentName(p.name);
      if (picked) {
        out.name = toPersonName(picked.name);
        lines.push(
          ...nameLines('.name', out.name, `${resolved.source} Practitioner.name[${picked.index}]`),
        );
      }
    }
    if (!out.identifier && sr.requester.identifier) {
      out.identifier = toIdentifier(sr.requester.identifier);
      if (out.identifier)
        lines.push(
          ...identifierLines('.identifier', out.identifier, 'ServiceRequest.requester.identifier'),
        );
    }
    if (!out.name && sr.requester.display) {
      out.name = nameFromDisplay(sr.requester.display);
      lines.push(...nameLines('.name', out.name, 'ServiceRequest.requester.display'));
      quirks.push({
        code: 'fhir-requester-display-only',
        detail: 'requester name split from Reference.display (not resolvable)',
      });
    }
    return out.identifier || out.name ? { value: out, lines, quirks } : EMPTY;
  },
  reasons: ({ sr, ctx }) => {
    const reasons: CodedConcept[] = [];
    const lines: LineageLine[] = [];
    // One code (system and code) is one reason: an EHR that gives the indication as reasonCode
    // and as a reasonReference to the Condition with that code stored it twice.
    const seen = new Set<string>();
    const isRepeat = (coded: CodedConcept): boolean => {
      if (!coded.code) return false;
      const key = `${coded.system ?? ''}|${coded.code}`;
      if (seen.has(key)) return true;
      seen.add(key);
      return false;
    };
    (sr.reasonCode ?? []).forEach((cc, i) => {
      const coded = codedFrom(cc);
      if ((!coded.code && !coded.display) || isRepeat(coded)) return;
      lines.push({
        suffix: `[${reasons.length}].${coded.code ? 'code' : 'display'}`,
        source: `ServiceRequest.reasonCode[${i}]`,
        value: coded.code ?? coded.display!,
      });
      reasons.push(coded);
    });
    (sr.reasonReference ?? []).forEach((ref, i) => {
      const key = referenceOf(ref);
      const target = key ? ctx.reasons.get(key) : undefined;
      const code = (target?.resource as { code?: CodeableConcept } | undefined)?.code;
      const coded = code ? codedFrom(code) : ref.display ? { display: ref.display } : undefined;
      if (!coded || (!coded.code && !coded.display) || isRepeat(coded)) return;
      const source = code
        ? `${target!.source} ${target!.resource.resourceType}.code`
        : `ServiceRequest.reasonReference[${i}].display`;
      lines.push({
        suffix: `[${reasons.length}].${coded.code ? 'code' : 'display'}`,
        source,
        value: coded.code ?? coded.display!,
      });
      reasons.push(coded);
    });
    return reasons.length ? { value: reasons, lines } : EMPTY;
  },
  occurrence: ({ sr }) => {
    const candidates: Array<[string | undefined, string]> = [
      [sr.occurrenceDateTime, 'ServiceRequest.occurrenceDateTime'],
      [sr.occurrencePeriod?.start, 'ServiceRequest.occurrencePeriod.start'],
      [sr.occurrenceTiming?.event?.[0], 'ServiceRequest.occurrenceTiming.event[0]'],
      // A scheduled window as EHRs write a Timing (R4 datatypes Timing.repeat.bounds[x]):
      // without it the order's requestedAt was authoredOn, the day before.
      [
        sr.occurrenceTiming?.repeat?.boundsPeriod?.start,
        'ServiceRequest.occurrenceTiming.repeat.boundsPeriod.start',
      ],
      [sr.authoredOn, 'ServiceRequest.authoredOn'],
    ];
    const hit = candidates.find(([v]) => Boolean(v));
    if (!hit) return EMPTY;
    // A dateTime with a time is normalised to a UTC instant; a date (or partial date) stays as
    // sent, and so does a dateTime whose UTC instant is no R4 dateTime: a leap second (no Date),
    // `9999-12-31T23:00:00-12:00` (`+010000-…` in UTC) or `0001-01-01T00:30:00+01:00` (year 0).
    const raw = hit[0]!;
    const utc =
      raw.includes('T') && !Number.isNaN(Date.parse(raw)) ? new Date(raw).toISOString() : '';
    const value = /^(?!0000)\d{4}-/.test(utc) ? utc : raw;
    return readFrom(value, hit[1]);
  },
  notes: ({ sr }) => {
    const notes = (sr.note ?? []).map((n) => n.text).filter((t): t is string => Boolean(t));
    return notes.length
      ? {
          value: notes,
          lines: notes.map((n, i) => ({
            suffix: `[${i}]`,
            source: `ServiceRequest.note[${i}].text`,
            value: n,
          })),
        }
      : EMPTY;
  },
  products: ({ sr, config }) => {
    const codings = sr.code?.coding ?? [];
    const resolved = resolveProducts(
      config.productTable,
      config.unknownProcedure,
      codings.map((c) => ({ code: c.code, system: codingKey(config, c.system) })),
    );
    if (resolved.kind === 'reject') {
      return {
        value: [],
        lines: [],
        issues: [
          {
            severity: 'error',
            code: 'code-invalid',
            expression: codings.length ? 'ServiceRequest.code.coding' : 'ServiceRequest.code',
            diagnostics: codings.length
              ? `no AI product is configured for ${codings.map(codingText).join(', ')}`
              : 'a coded procedure is required to choose the AI products',
          },
        ],
      };
    }
    const source = resolved.row
      ? `ServiceRequest.code.coding[${resolved.index ?? 0}]`
      : 'ServiceRequest.code';
    return {
      value: resolved.products.map((p) => p.product),
      lines: productLineage(resolved.products, source),
      ...(resolved.row
        ? {}
        : {
            quirks: [
              {
                code: 'fhir-unknown-procedure',
                detail: 'procedure not in the product table: default products used',
              },
            ],
          }),
    };
  },
};
