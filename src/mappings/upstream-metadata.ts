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
}

const SEX: Record<AdministrativeSex, string> = {
  male: 'M',
  female: 'F',
  other: 'O',
  unknown: 'U',
};

export const SANDBOX_OUTCOMES = [
  'delivered',
  'qc_failed',
  'qc_bypass_refused',
  'invalid_study',
  'unknown_status',
  'failed',
  'preprocessing_failed',
  'in_review',
  'expired',
] as const;

const SANDBOX_NOTE = /sandbox[-_ ]outcome\s*[:=]\s*([a-z_]+)/i;

export function toUpstreamMetadata(
  request: OrderRequest,
  options: UpstreamMetadataOptions = {},
): Record<string, unknown> {
  const patient = request.patient;
  const primary =
    patient.identifiers.find((i) => i.type === 'MR') ?? patient.identifiers[0] ?? undefined;
  const metadata: Record<string, unknown> = {
    patient_id: primary?.value,
    patient_name: personName(patient.name),
    // DICOM DA (PS3.5 6.2): YYYYMMDD; a partial date is sent as far as it is known.
    patient_birth_date: patient.birthDate?.replace(/-/g, ''),
    patient_sex: patient.sex ? SEX[patient.sex] : undefined,
    accession_number: request.accessionNumber,
    study_uid: request.studyInstanceUid,
    modality: request.modality,
    procedure_code: request.procedure?.code,
    priority: request.priority,
    referring_physician: personName(request.orderingProvider?.name),
    products: request.products.length > 0 ? request.products : undefined,
  };
  if (options.sandboxOutcomeFromNotes) {
    for (const note of request.notes ?? []) {
      const m = SANDBOX_NOTE.exec(note);
      const outcome = m?.[1]?.toLowerCase();
      if (outcome && (SANDBOX_OUTCOMES as readonly string[]).includes(outcome)) {
        metadata.sandbox_outcome = outcome;
      }
    }
  }
  return Object.fromEntries(Object.entries(metadata).filter(([, v]) => v !== undefined));
}

function personName(name: PersonName | undefined): string | undefined {
  if (!name || (!name.family && !name.given?.length)) return undefined;
  return [name.family ?? '', (name.given ?? []).join(' ')].join('^').replace(/\^$/, '');
}
