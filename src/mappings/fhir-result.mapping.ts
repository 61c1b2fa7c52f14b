import type {
  Attachment,
  CodeableConcept,
  DiagnosticReport,
  Device,
  Identifier,
  Observation,
  Patient,
  Reference,
  ServiceRequest,
  Task,
} from '@medplum/fhirtypes';
import { fhirCode, fhirIdentifierSystem, fhirString, fhirText, fhirUri } from './fhir-values';
import { fhirCodeSystemOf } from './coding-systems.table';
import { embeddedPdf, pdfReference, qcReportForm } from './result-pdf';
import { canonicalSystem } from './product-table';
import { SEE_ATTACHED_REPORT } from './result-content.mapping';
import { noResultPhrase, noResultSentence } from './local-end-reasons';
import type { PublicationInput } from './publication.model';
import type { LocalEndKey } from './status-mapping.table';
import {
  BUSINESS_STATUS_SYSTEM,
  LOCAL_END_BUSINESS_STATUS,
  localEndBusinessStatus,
} from './task-business-status.table';

/**
 * Task and DiagnosticReport (FHIR R4) for one publication. Identifiers are deterministic (the
 * order id), and the publisher writes them with a conditional update on that identifier
 * (R4 http.html#cond-update), so a resend is an update, never a second resource.
 *
 * R4 does not allow a Device as DiagnosticReport.performer (Practitioner | PractitionerRole |
 * Organization | CareTeam): the AI product is a contained Device referenced as Task.owner
 * (which allows Device) and as Observation.device of every measurement.
 */
export const ADAPTER_SYSTEM = {
  order: 'urn:imaging-ai-adapter:order',
  report: 'urn:imaging-ai-adapter:diagnostic-report',
  upstreamStatus: BUSINESS_STATUS_SYSTEM.upstreamStatus,
  /** The ends of an order here, without an upstream status (ENDED_LOCALLY_* rows). */
  localEnd: BUSINESS_STATUS_SYSTEM.localEnd,
  /** An order state without an upstream status to show (the served Task). */
  orderState: BUSINESS_STATUS_SYSTEM.orderState,
  measurement: 'urn:imaging-ai-adapter:measurement',
} as const;

const UCUM = 'http://unitsofmeasure.org';
const LOINC = 'http://loinc.org';
/** v2 table 0074 diagnostic service section, RAD = radiology (R4 DiagnosticReport.category example binding). */
const IMAGING_CATEGORY: CodeableConcept = {
  coding: [
    { system: 'http://terminology.hl7.org/CodeSystem/v2-0074', code: 'RAD', display: 'Radiology' },
    { system: LOINC, code: 'LP29684-5', display: 'Radiology' },
  ],
  text: 'imaging',
};
/** R4 observation-category `imaging`. */
const OBSERVATION_CATEGORY: CodeableConcept = {
  coding: [
    {
      system: 'http://terminology.hl7.org/CodeSystem/observation-category',
      code: 'imaging',
      display: 'Imaging',
    },
  ],
};
/** v3 ObservationInterpretation: L low, N normal, H high. */
const INTERPRETATION = {
  low: { code: 'L', display: 'Low' },
  normal: { code: 'N', display: 'Normal' },
  high: { code: 'H', display: 'High' },
} as const;

export function taskIdentifier(orderId: string): Identifier {
  return { system: ADAPTER_SYSTEM.order, value: orderId };
}

export function reportIdentifier(orderId: string): Identifier {
  return { system: ADAPTER_SYSTEM.report, value: orderId };
}

/** `{ [key]: value }` when there is a value, else nothing (an element is left out, never empty). */
function optional<K extends string>(key: K, value: string | undefined): { [k in K]?: string } {
  return value === undefined ? {} : ({ [key]: value } as { [k in K]: string });
}

function serviceRequestRef(input: PublicationInput): Reference<ServiceRequest> {
  if (input.serviceRequest) return { reference: input.serviceRequest };
  const placer = input.order.request.placerOrderNumber;
  const system = fhirIdentifierSystem(placer?.system);
  return {
    type: 'ServiceRequest',
    identifier: {
      ...(system ? { system } : {}),
      value:
        fhirText(placer?.value) ??
        fhirText(input.order.placerOrderNumber ?? undefined) ??
        input.orderId,
    },
  };
}

function subjectRef(input: PublicationInput): Reference<Patient> {
  // A local reference (`#pat1`, the EHR ServiceRequest's contained Patient) means something
  // only inside that ServiceRequest (R4 ref-1): the patient is then named by identifier.
  if (input.patientReference && !input.patientReference.startsWith('#'))
    return { reference: input.patientReference };
  // the first identifier that says something (an HL7 PID-3 may lead with one of spaces)
  const id = input.order.request.patient.identifiers.find((i) => fhirText(i.value));
  const system = fhirIdentifierSystem(id?.system);
  return {
    type: 'Patient',
    identifier: { ...(system ? { system } : {}), value: fhirText(id?.value) ?? 'unknown' },
  };
}

/**
 * Device.udiCarrier of a UDI string. In GS1 human-readable form (`(01)00812345678906(10)3.2.0`,
 * as GET /products answers and labels print it) the device identifier is the GTIN after (01),
 * the rest production identifiers: the DI, GS1 as issuer, and the whole string as carrierHRF.
 * Before, the whole string was the deviceIdentifier, under which a GUDID lookup finds nothing.
 * Any other form is kept whole as the identifier.
 */
function udiCarrierOf(udi: string): NonNullable<Device['udiCarrier']>[number] {
  const di = /^\(01\)(\d{14})(?:\(|$)/.exec(udi)?.[1];
  return di
    ? { deviceIdentifier: di, issuer: 'http://hl7.org/fhir/NamingSystem/gs1-di', carrierHRF: udi }
    : { deviceIdentifier: udi };
}

function deviceResource(input: PublicationInput): Device {
  const d = input.device;
  const udi = fhirText(d.udi);
  const manufacturer = fhirText(d.manufacturer);
  const name = fhirText(d.name);
  const version = fhirText(d.version);
  return {
    resourceType: 'Device',
    id: 'ai-device',
    ...(udi ? { udiCarrier: [udiCarrierOf(udi)] } : {}),
    identifier: [{ system: 'urn:dicom:uid', value: `urn:oid:${d.uid}` }],
    ...(manufacturer ? { manufacturer } : {}),
    ...(name ? { deviceName: [{ name, type: 'manufacturer-name' }] } : {}),
    ...(version ? { version: [{ value: version }] } : {}),
  };
}

function reportCode(input: PublicationInput): CodeableConcept {
  const p = input.order.request.procedure;
  const text = fhirString(`AI analysis (${input.order.request.products.join(', ') || 'imaging'})`);
  const code = fhirCode(p?.code);
  if (!p || !code) return { text };
  const display = fhirText(p.display);
  // an HL7 order's table 0396 mnemonic (or a synonym: LNC, SNOMED CT, CPT4) as its FHIR URI
  const system =
    p.system && /^(https?:|urn:)/.test(p.system)
      ? p.system
      : fhirCodeSystemOf(canonicalSystem(p.system));
  return {
    coding: [
      {
        ...(system ? { system: fhirUri(system) } : {}),
        code,
        ...(display ? { display } : {}),
      },
    ],
    text,
  };
}

/**
 * Task.businessStatus of a publication (R4 task.html: "the domain-specific state"): the
 * upstream status under its system, or for an end here the local-end row (our code system, the
 * row key as code with a display, and a short text a clinician reads;
 * task-business-status.table.ts). Before, the text was the bare key ("ENDED_LOCALLY_CANCELLED")
 * under the upstream-status system, whose codes are the upstream's statuses.
 */
function businessStatusOf(input: PublicationInput): CodeableConcept {
  const { row } = input;
  const upstream = fhirCode(input.upstreamStatus ?? undefined);
  if (!upstream && Object.hasOwn(LOCAL_END_BUSINESS_STATUS, row.key))
    return localEndBusinessStatus(row.key as LocalEndKey);
  const code = upstream ?? row.key;
  return { coding: [{ system: ADAPTER_SYSTEM.upstreamStatus, code }], text: code };
}

/** Task.status / statusReason / businessStatus per the row (DESIGN.md section 4). */
export function buildTask(input: PublicationInput): Task {
  const { row } = input;
  // A QC bypass records who decided and why (DESIGN.md section 4, QC_BYPASS row).
  const bypass =
    row.key === 'QC_BYPASS' && input.qcBypass
      ? `by ${input.qcBypass.by}${input.qcBypass.reason ? `: ${input.qcBypass.reason}` : ''}`
      : undefined;
  const reason = fhirText(
    [noResultPhrase(row.task.reason, input.reason), bypass].filter(Boolean).join(': '),
  );
  const hasReport = row.report !== undefined && row.terminal;
  // R4 task.html: businessStatus is the domain-specific state; here the upstream status as
  // the served Task has it (docs/results.md), or the end here. The row's `note` explains the
  // row to the analyst (mapping tables page) and is not for the clinic: it was the published
  // text.
  return {
    resourceType: 'Task',
    contained: [deviceResource(input)],
    identifier: [taskIdentifier(input.orderId)],
    basedOn: [serviceRequestRef(input)],
    status: row.task.status,
    ...(reason ? { statusReason: { text: reason } } : {}),
    businessStatus: businessStatusOf(input),
    intent: 'order',
    code: {
      coding: [
        {
          system: 'http://hl7.org/fhir/CodeSystem/task-code',
          code: 'fulfill',
          display: 'Fulfill the focal request',
        },
      ],
    },
    focus: serviceRequestRef(input),
    for: subjectRef(input),
    authoredOn: input.order.createdAt,
    lastModified: input.statusAt,
    owner: { reference: '#ai-device', ...optional('display', fhirText(input.device.name)) },
    ...(hasReport
      ? {
          output: [
            {
              type: { text: 'DiagnosticReport' },
              valueReference: {
                type: 'DiagnosticReport',
                identifier: reportIdentifier(input.orderId),
              },
            },
          ],
        }
      : {}),
  };
}

function conclusionOf(input: PublicationInput): string {
  const { row } = input;
  if (row.report === 'final' || row.report === 'corrected') {
    const parts = [fhirText(input.results?.impression) ?? SEE_ATTACHED_REPORT];
    if (input.results?.caveat) parts.push(input.results.caveat);
    else if (input.results?.qcBypassed || input.qcBypass) {
      parts.push('QC failure was bypassed on user request: interpret with caution.');
    }
    return parts.join(' ');
  }
  return noResultSentence(row.conclusion ?? 'No result.', input.reason);
}

/** The DiagnosticReport of a terminal row (final/corrected results, or cancelled with the reason). */
export function buildDiagnosticReport(input: PublicationInput): DiagnosticReport {
  const { row } = input;
  const isResult = row.report === 'final' || row.report === 'corrected';
  const status = isResult && input.correction ? 'corrected' : (row.report ?? 'cancelled');
  const subject = subjectRef(input);
  const observations: Observation[] = [];
  if (isResult && input.results) {
    let n = 0;
    for (const f of input.results.findings) {
      for (const m of f.measurements) {
        n += 1;
        observations.push({
          resourceType: 'Observation',
          id: `m${n}`,
          status: status === 'corrected' ? 'corrected' : 'final',
          category: [OBSERVATION_CATEGORY],
          code: {
            coding: [
              {
                system: ADAPTER_SYSTEM.measurement,
                code: fhirCode(m.id) ?? 'x',
                ...optional('display', fhirText(m.label)),
              },
            ],
            ...optional('text', fhirText(m.label)),
          },
          subject,
          effectiveDateTime: input.statusAt,
          valueQuantity: {
            value: m.value,
            ...optional('unit', fhirText(m.unitDisplay)),
            system: UCUM,
            code: m.ucum,
          },
          ...(f.flag && m.quantity === 'volume'
            ? {
                interpretation: [
                  {
                    coding: [
                      {
                        system:
                          'http://terminology.hl7.org/CodeSystem/v3-ObservationInterpretation',
                        ...INTERPRETATION[f.flag],
                      },
                    ],
                  },
                ],
              }
            : {}),
          device: { reference: '#ai-device' },
        });
      }
    }
  }
  const forms: Attachment[] = [];
  const pdf = embeddedPdf(input);
  const pdfRef = pdfReference(input);
  const pdfTitle = isResult ? 'AI analysis report' : 'Failure report';
  if (pdf) {
    forms.push({ contentType: 'application/pdf', data: pdf.toString('base64'), title: pdfTitle });
  } else if (pdfRef) {
    // above OUTBOUND_PDF_EMBED_MAX_BYTES: its size and hash, and where the PACS keeps it
    forms.push({
      contentType: 'application/pdf',
      ...(pdfRef.url ? { url: pdfRef.url } : {}),
      size: pdfRef.bytes,
      hash: pdfRef.sha1,
      title: `${pdfTitle} (${pdfRef.bytes} bytes, not embedded${pdfRef.url ? '; in the PACS' : ''})`,
    });
  }
  const qcForm = qcReportForm(input);
  if (qcForm) forms.push(qcForm);
  const study = input.dicom?.studyInstanceUid ?? input.order.studyInstanceUid;
  return {
    resourceType: 'DiagnosticReport',
    // The Device only when a measurement names it (Observation.device): contained and referenced
    // from nowhere (a cancelled report, a result with an impression only) breaks R4 dom-3, and
    // a server enforcing it refused the no-result report. The Task names it as its owner.
    ...(observations.length > 0 ? { contained: [deviceResource(input), ...observations] } : {}),
    identifier: [reportIdentifier(input.orderId)],
    basedOn: [serviceRequestRef(input)],
    status,
    category: [IMAGING_CATEGORY],
    code: reportCode(input),
    subject,
    effectiveDateTime: input.order.request.requestedAt ?? input.order.createdAt,
    issued: input.statusAt,
    ...(study
      ? {
          imagingStudy: [
            {
              type: 'ImagingStudy',
              identifier: { system: 'urn:dicom:uid', value: `urn:oid:${study}` },
            },
          ],
        }
      : {}),
    ...(observations.length > 0
      ? { result: observations.map((o) => ({ reference: `#${o.id}` })) }
      : {}),
    conclusion: fhirString(conclusionOf(input)),
    ...(forms.length > 0 ? { presentedForm: forms } : {}),
  };
}
