import { AckOutcome, BuiltAck, buildAck, Hl7ErrorDetail } from '../hl7/hl7-ack.builder';
import { Hl7Error } from '../hl7/hl7.error';
import { Hl7Message, parseHl7 } from '../hl7/hl7-message';
import {
  checkStructure,
  DEFAULT_STRUCTURE_CHECK_OPTIONS,
  StructureCheckOptions,
} from '../hl7/hl7-structure.validator';
import { DEFAULT_HL7_ORDER_MAPPING_CONFIG, Hl7OrderMappingConfig } from './hl7-order.config';
import { Hl7MappingResult, mapHl7Message } from './hl7-order.mapping';

export interface InboundEvaluationInput {
  bytes: Buffer;
  mappingConfig?: Hl7OrderMappingConfig;
  structureOptions?: StructureCheckOptions;
  /** MSH-10 for the ACK (injected generator). */
  ackControlId: string;
  now: Date;
}

export type InboundEvaluation =
  | {
      kind: 'evaluated';
      message: Hl7Message;
      outcome: AckOutcome;
      /** undefined when the structure check rejected the message (AR): nothing was mapped. */
      mapping?: Hl7MappingResult;
      errors: Hl7ErrorDetail[];
      ack: BuiltAck;
    }
  /** No MSH could be read: there is nothing to address an ACK to. */
  | { kind: 'unparseable'; error: Hl7Error };

/**
 * Everything that decides the answer to one inbound HL7 message, without I/O: parse, structure
 * check (AR), mapping (AE on content errors), and the ACK that goes with it. The caller stores
 * the raw bytes and the result in one transaction and only then writes `ack.bytes`
 * (acknowledge after commit). Whether that answer is written at all (MSH-15/MSH-16, table
 * 0155) is not decided here: it depends on the code finally stored (a resend gets its first
 * answer, intake may refuse a change AE), so the MLLP handler decides it once, on that code
 * (`acceptAckWanted`). An `ackWanted` computed here from this outcome was read by nothing but
 * a golden file, and disagreed with the handler (`NE` with MSH-16 empty: false here, answered
 * there).
 */
export function evaluateInboundHl7(input: InboundEvaluationInput): InboundEvaluation {
  let message: Hl7Message;
  try {
    message = parseHl7(input.bytes);
  } catch (error) {
    if (error instanceof Hl7Error) return { kind: 'unparseable', error };
    throw error;
  }
  const structure = checkStructure(
    message,
    input.structureOptions ?? DEFAULT_STRUCTURE_CHECK_OPTIONS,
  );
  let mapping: Hl7MappingResult | undefined;
  let outcome: AckOutcome = structure.outcome;
  let errors: Hl7ErrorDetail[] = structure.errors;
  if (structure.outcome === 'accept') {
    mapping = mapHl7Message(message, input.mappingConfig ?? DEFAULT_HL7_ORDER_MAPPING_CONFIG);
    outcome = mapping.outcome === 'error' ? 'error' : 'accept';
    errors = [...structure.errors, ...mapping.errors];
  }
  const ack = buildAck({
    inbound: message,
    outcome,
    errors,
    controlId: input.ackControlId,
    now: input.now,
  });
  return {
    kind: 'evaluated',
    message,
    outcome,
    mapping,
    errors,
    ack,
  };
}
