import type { AdministrativeSex, OrderAction, OrderPriority } from '../domain/order-request';

/**
 * HL7 table 0119 (order control codes, ORC-1, v2.5.1 chapter 4) → what we do with the order.
 * Only these are accepted in ORC-1; anything else is answered AE 103 at ORC-1.
 */
export const ORDER_CONTROL_TO_ACTION = {
  NW: 'create', // new order
  CA: 'cancel', // cancel order request
  DC: 'cancel', // discontinue order request
  OD: 'cancel', // order discontinued (filler-initiated, as DC; answered DR / UD)
  OC: 'cancel', // order canceled (filler-initiated, unsolicited: a RIS acting as filler)
  XO: 'update', // change order request
  XX: 'update', // order changed (filler-initiated, unsolicited: XO's counterpart, as OC is CA's)
  SC: 'status', // status changed: recorded only
} as const satisfies Record<string, OrderAction>;

/**
 * ORC-1 `SC` (status changed) whose ORC-5 (order status, table 0038) says the order ended
 * without being done: a RIS acting as filler reports a cancelled or discontinued exam this
 * way (dcm4chee-arc's HL7 order configuration lists `SC_DC` among the ORC-1/ORC-5 pairs it
 * reads as DISCONTINUED). Recorded as a mere status, the AI order ran on and its result was
 * published for an exam that was called off. Any other status (IP, CM, SC…) stays `status`.
 */
export const STATUS_CHANGE_TO_ACTION = {
  CA: 'cancel', // order was canceled
  DC: 'cancel', // order was discontinued
} as const satisfies Record<string, OrderAction>;

/** HL7 table 0038 (order status, ORC-5, v2.5.1 chapter 4). */
export const TABLE_0038 = ['A', 'CA', 'CM', 'DC', 'ER', 'HD', 'IP', 'RP', 'SC'] as const;

/**
 * The order controls of table 0119 that answer a request (v2.5.1 chapter 4, table 0119 and
 * its notes), each with the request it answers and its meaning: a filler (or a placer
 * answering the filler) sends them, never as a request of its own. This receiver is the
 * filler: one arriving here is refused (AE 103 at ORC-1) naming the request that was meant.
 */
export const TABLE_0119_ANSWERS: Readonly<Record<string, { answers: string; meaning: string }>> = {
  OK: { answers: 'NW', meaning: 'order accepted' },
  UA: { answers: 'NW', meaning: 'unable to accept order' },
  CR: { answers: 'CA', meaning: 'canceled as requested' },
  UC: { answers: 'CA', meaning: 'unable to cancel' },
  DR: { answers: 'DC', meaning: 'discontinued as requested' },
  UD: { answers: 'DC', meaning: 'unable to discontinue' },
  XR: { answers: 'XO', meaning: 'changed as requested' },
  UX: { answers: 'XO', meaning: 'unable to change' },
  HR: { answers: 'HD', meaning: 'on hold as requested' },
  UH: { answers: 'HD', meaning: 'unable to put on hold' },
  OR: { answers: 'RL', meaning: 'released as requested' },
  UR: { answers: 'RL', meaning: 'unable to release' },
  RQ: { answers: 'RP', meaning: 'replaced as requested' },
  UM: { answers: 'RP', meaning: 'unable to replace' },
  OF: { answers: 'RF', meaning: 'refilled as requested' },
  UF: { answers: 'RF', meaning: 'unable to refill' },
  SR: { answers: 'SS', meaning: 'response to send order status request' },
};

/**
 * HL7 table 0119 (v2.5.1) in full: a code listed here but not in ORDER_CONTROL_TO_ACTION is a
 * valid order control the adapter does not act on, and the answer says so (not "not found").
 */
export const TABLE_0119 = new Set([
  'AF',
  'CA',
  'CH',
  'CN',
  'CR',
  'DC',
  'DE',
  'DF',
  'DR',
  'FU',
  'HD',
  'HR',
  'LI',
  'NA',
  'NW',
  'OC',
  'OD',
  'OE',
  'OF',
  'OH',
  'OK',
  'OP',
  'OR',
  'PA',
  'PR',
  'PY',
  'RE',
  'RF',
  'RL',
  'RO',
  'RP',
  'RQ',
  'RR',
  'RU',
  'SC',
  'SN',
  'SR',
  'SS',
  'UA',
  'UC',
  'UD',
  'UF',
  'UH',
  'UM',
  'UN',
  'UR',
  'UX',
  'XO',
  'XR',
  'XX',
]);

/** HL7 table 0001 (administrative sex, PID-8, v2.5.1 chapter 3) → FHIR-style AdministrativeSex. */
export const TABLE_0001_SEX = {
  M: 'male',
  F: 'female',
  O: 'other',
  U: 'unknown',
  A: 'other', // ambiguous
  N: 'unknown', // not applicable
} as const satisfies Record<string, AdministrativeSex>;

/**
 * Free-text sex values seen from real senders (whole words, any case). Tolerated, and
 * recorded as a `free-text-sex` quirk so that the interface can be corrected at the source.
 */
export const FREE_TEXT_SEX: Readonly<Record<string, AdministrativeSex>> = {
  male: 'male',
  man: 'male',
  masculin: 'male',
  männlich: 'male',
  maennlich: 'male',
  female: 'female',
  woman: 'female',
  féminin: 'female',
  weiblich: 'female',
  other: 'other',
  divers: 'other',
  unknown: 'unknown',
  unbekannt: 'unknown',
};

/**
 * HL7 table 0027 (priority, TQ-6 in ORC-7/OBR-27; TQ1-9 uses the same codes) → OrderPriority.
 * P (pre-op) and T (timing critical) need the result at a given time: urgent.
 * C (callback) and PRN (as needed) carry no urgency: routine.
 */
export const TABLE_0027_PRIORITY = {
  S: 'stat',
  A: 'asap',
  R: 'routine',
  P: 'urgent',
  C: 'routine',
  T: 'urgent',
  PRN: 'routine',
} as const satisfies Record<string, OrderPriority>;

/**
 * Priority words seen in TQ-6 / TQ1-9 from real senders instead of table 0027 codes (whole
 * value, any case). Tolerated and recorded as a `free-text-priority` quirk, like free-text sex;
 * a word not listed here is left out with a warning, as an unknown code is.
 */
export const FREE_TEXT_PRIORITY: Readonly<Record<string, OrderPriority>> = {
  stat: 'stat',
  asap: 'asap',
  routine: 'routine',
  urgent: 'urgent',
  emergency: 'stat',
};

/**
 * Modality values accepted from IPC-5 / OBR-24. IHE RAD TF-2 (RAD-4) carries the DICOM
 * modality (PS3.3 C.7.3.1.1.1 defined terms) there; some senders use HL7 table 0074
 * diagnostic service sections instead, mapped where the DICOM modality is unambiguous.
 * RX/RAD ("radiograph", "radiology") could be CR, DX or others: not mapped, recorded.
 */
export const DICOM_MODALITIES = [
  'CR',
  'CT',
  'DX',
  'IO',
  'MG',
  'MR',
  'NM',
  'OT',
  'PT',
  'PX',
  'RF',
  'US',
  'XA',
  'XC',
  'OP',
  'OPT',
  'ES',
  'SM',
] as const;

export const TABLE_0074_TO_MODALITY: Readonly<Record<string, string>> = {
  NMR: 'MR', // nuclear magnetic resonance
  NMS: 'NM', // nuclear medicine scan
  RUS: 'US', // radiology ultrasound
  CUS: 'US', // cardiac ultrasound
  OUS: 'US', // OB ultrasound
  VUS: 'US', // vascular ultrasound
};
