import { primaryIdentifier } from '../domain/patient-identity';
import type { StudyRequest } from '../domain/study-acquirer.port';
import type { OrderRow } from '../persistence/order.repository';

/**
 * What the study acquirer is asked for an order: its identifiers, and the domain of its
 * patient ID (the assigning authority of the identifier the order is known by), which the
 * identity check compares with the study's Issuer of Patient ID, and who issued its accession
 * number (compared with the study's Issuer of Accession Number Sequence).
 */
export function studyRequestOf(order: OrderRow): StudyRequest {
  const id = primaryIdentifier(order.request?.patient);
  return {
    orderId: order.id,
    studyInstanceUid: order.study_instance_uid,
    accessionNumber: order.accession_number,
    patientId: order.patient_id,
    patientIdIssuer: id && id.value === order.patient_id ? (id.system ?? null) : null,
    // the record numbers a merge retired into the order's patient: images taken before it
    ...(order.retired_patient_identifiers?.length
      ? {
          retiredPatientIds: order.retired_patient_identifiers.map((r) => ({
            value: r.value,
            issuer: r.system ?? null,
          })),
        }
      : {}),
    // the issuer of the accession the order has now, not of one an update replaced
    accessionIssuer:
      order.request?.accessionNumber === order.accession_number
        ? (order.request?.accessionIssuer ?? null)
        : null,
  };
}
