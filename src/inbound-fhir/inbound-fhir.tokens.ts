/** Injection tokens of the FHIR front door. */
export const FHIR_FRONT_DOOR_CONFIG = Symbol('FHIR_FRONT_DOOR_CONFIG');
export const EHR_FHIR_CLIENT = Symbol('EHR_FHIR_CLIENT');
export const FHIR_OPERATION_DEPS = Symbol('FHIR_OPERATION_DEPS');
