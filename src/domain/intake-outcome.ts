import type { OrderState } from './order-state';

/** What the intake did with each order group of a message, and the answer its front door gives. */

export type IntakeOrderResult =
  | { kind: 'created'; orderId: string; sourceRef: string }
  | { kind: 'already-known'; orderId: string; sourceRef: string }
  | { kind: 'cancel-accepted'; orderId: string; sourceRef: string }
  | { kind: 'cancel-too-late'; orderId: string; state: OrderState; sourceRef: string }
  | { kind: 'updated'; orderId: string; sourceRef: string }
  /** A change to an order that has ended (delivered, failed, cancelled…): not applied. */
  | { kind: 'change-too-late'; orderId: string; state: OrderState; sourceRef: string }
  /**
   * A cancel or change not applied because it cannot mean this order: it names another patient
   * (`other-patient`), or it changes the AI products of an order the upstream already runs
   * (`products-placed`: the upstream takes no new products for an order), or it moves the
   * accession number or Study Instance UID of an order whose study is already found, packaged or
   * analysed (`study-used`). The message is refused. A new HL7 order (`create`) whose placer
   * number already names another patient's order is refused the same way (`other-patient`),
   * and one whose accession, study, procedure, priority or modality differs from the known
   * order's (`other-content`: a change sent as NW, not XO).
   */
  | {
      kind: 'change-refused';
      action: 'cancel' | 'change' | 'create';
      reason: 'other-patient' | 'products-placed' | 'study-used' | 'other-content';
      /** study-used: the study identifier the change would have moved. */
      field?: 'accession-number' | 'study-instance-uid';
      /** other-content (a new HL7 order under a known number): the first field that differs. */
      content?: 'accession-number' | 'study-instance-uid' | 'procedure' | 'priority' | 'modality';
      orderId: string;
      sourceRef: string;
      /** products-placed: the products the upstream runs, and the ones the change asked for. */
      products?: { placed: string[]; asked: string[] };
    }
  | { kind: 'status-recorded'; orderId: string | null; sourceRef: string }
  | { kind: 'unknown-order'; action: string; sourceRef: string };

export interface IntakeOutcome {
  results: IntakeOrderResult[];
  patientOrdersUpdated: number;
}

export interface IntakeResponse {
  /** `AA`, `AE`, `CA`, `201`… what the answer says, for the audit log and search. */
  code: string;
  body: Buffer;
  contentType: string;
  /** false: the answer refuses the message; nothing of it is applied and it is stored as rejected. */
  accepted: boolean;
  error?: Record<string, unknown>;
}
