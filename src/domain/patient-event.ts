import type { Identifier, MappedField, PatientInfo } from './order-request';

/**
 * What a patient message (HL7 ADT^A08 / ADT^A40) says about a patient whose orders may be
 * open: new demographics, or a merge into a surviving record.
 */
export type PatientEvent =
  | {
      kind: 'patient-update';
      /** `A08` (ITI-31, the default) or `A31` (update person information, ITI-30): one meaning. */
      trigger?: 'A08' | 'A31';
      patient: PatientInfo;
      lineage: MappedField[];
      /**
       * Demographics the message deletes: the explicit null `""` (HL7 v2.5.1 §2.5.3, "delete
       * the value the receiver holds"), as opposed to a field left empty (no change).
       */
      cleared?: ReadonlyArray<'birthDate' | 'sex'>;
    }
  | {
      kind: 'patient-merge';
      /** The surviving patient (PID). */
      patient: PatientInfo;
      /** Identifiers that ceased to exist (MRG-1): open orders carrying them move to `patient`. */
      priorIdentifiers: Identifier[];
      /**
       * The message: `A40` a merge into a surviving record, `A47` one identifier of the patient
       * changed (v2.5.1 §3.3.47: MRG-1 the incorrect one, PID-3 the correct one). Both replace
       * MRG-1 by PID-3 in the order's identifiers and keep the rest.
       */
      trigger?: 'A40' | 'A47';
      lineage: MappedField[];
    };
