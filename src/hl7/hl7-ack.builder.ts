import { randomUUID } from 'node:crypto';
import {
  charsetLabel,
  encodeText,
  namesTable0211Value,
  table0211Value,
  writesAs,
} from './hl7-charset';
import {
  encodeMessage,
  formatHl7Timestamp,
  Hl7Component,
  Hl7FieldValue,
  Hl7SegmentSpec,
} from './hl7-builder';
import { escapeValue, escapeWithin, Hl7Delimiters } from './hl7-escape';
import { CONTROL_ID_MAX_CHARS, HD_MAX_CHARS } from './hl7-echo-lengths';
import { parseLocation } from './hl7-location';
import { Hl7Message } from './hl7-message';
import { salvageControlId } from './hl7-separators';
import { HL7_VERSION_IDS } from './hl7-versions';

/**
 * HL7 table 0357, message error condition codes (v2.5.1 ERR-3, chapter 2; the same codes
 * since v2.3.1), used in ERR-3 (v2.5+) and ERR-1.4 (v2.3/2.4).
 */
export const HL7_ERROR_CONDITIONS = {
  100: 'Segment sequence error',
  101: 'Required field missing',
  102: 'Data type error',
  103: 'Table value not found',
  200: 'Unsupported message type',
  201: 'Unsupported event code',
  202: 'Unsupported processing id',
  203: 'Unsupported version id',
  204: 'Unknown key identifier',
  205: 'Duplicate key identifier',
  206: 'Application record locked',
  207: 'Application internal error',
} as const;

export type Hl7ErrorCondition = keyof typeof HL7_ERROR_CONDITIONS;

/** Table 0516 error severity (ERR-4, v2.5+): Error, Warning, Information. */
export type Hl7ErrorSeverity = 'E' | 'W' | 'I';

/** One problem to report in an ERR segment. */
export interface Hl7ErrorDetail {
  /** Location as in Hl7Location text (e.g. `ORC[2]-1`, `PID-3`); absent for message-wide errors. */
  location?: string;
  code: Hl7ErrorCondition;
  severity: Hl7ErrorSeverity;
  /** Human-readable, PHI-free text for ERR-8 (v2.5+) / MSA-3, cut to 80 (first error, v2.1-2.4). */
  message: string;
  /**
   * The same sentence in at most 80 characters for MSA-3 (ST 80, v2.1-2.4), used when
   * `message` is longer: what is wrong, where, and what the sender should do, the advice
   * before anything that may be cut. ERR-1 carries the location and code beside it.
   */
  brief?: string;
}

/** Original-mode codes (MSA-1, table 0008) and their enhanced-mode accept equivalents. */
export type AckOutcome = 'accept' | 'error' | 'reject';
export type AckCode = 'AA' | 'AE' | 'AR' | 'CA' | 'CE' | 'CR';
export type AckMode = 'original' | 'enhanced';

/** Table 0155 (accept/application acknowledgment conditions, MSH-15/MSH-16). */
export const TABLE_0155 = ['AL', 'NE', 'ER', 'SU'] as const;
export type AcknowledgmentCondition = (typeof TABLE_0155)[number];

/**
 * MSH-15 or MSH-16 as a table 0155 condition; undefined when empty or when it holds no table
 * 0155 value (`XX`, `always`): such a field asks for nothing, so it is read as not valued
 * (v2.5.1 §2.9.2: original mode when neither field is valued) and the answer warns ERR 103
 * at it (hl7-structure.validator). Before, any text there switched the answer to enhanced
 * mode (`XX|XX` answered CA, an accept acknowledgment the sender never asked for). ID values
 * are case-sensitive (v2.5.1 §2.5.3.2), as MSH-9, MSH-11 and ORC-1 are read here: `al` is no
 * table 0155 value and is read as empty too (the warning says its case). Before, lower case
 * was read as the code, `al|al` answered CA without a word while `p` in MSH-11 was AR 202.
 */
export function acknowledgmentCondition(
  inbound: Hl7Message,
  field: 15 | 16,
): AcknowledgmentCondition | undefined {
  const value = inbound.msh.code(field);
  return (TABLE_0155 as readonly string[]).includes(value ?? '')
    ? (value as AcknowledgmentCondition)
    : undefined;
}

/**
 * Enhanced acknowledgment mode is requested when MSH-15 (accept acknowledgment type) or
 * MSH-16 (application acknowledgment type) holds a table 0155 condition (v2.5.1 section
 * 2.9.3); otherwise the original mode (2.9.2) applies.
 */
export function ackModeOf(inbound: Hl7Message): AckMode {
  return acknowledgmentCondition(inbound, 15) !== undefined ||
    acknowledgmentCondition(inbound, 16) !== undefined
    ? 'enhanced'
    : 'original';
}

/**
 * Which acknowledgment our one answer is. We answer once, after the message has been parsed,
 * mapped and committed, so it can be either (v2.5.1 §2.9.3): the accept acknowledgment
 * (CA/CE/CR) when the sender asks for one for this outcome (enhanced mode, MSH-15 AL/ER/SU or
 * empty), else the application acknowledgment (AA/AE/AR): original mode, and enhanced mode
 * where MSH-15 wants no accept acknowledgment for this outcome and MSH-16 wants an
 * application one (`NE|AL`, as IHE LAW senders write it and read the AA on the same MLLP
 * connection; `ER|AL` on success, `SU|ER` on error). Before, `NE|AL` was answered CA, the
 * accept acknowledgment the sender had said it never wants, and `ER|AL` CA on success.
 */
export function ackKindOf(inbound: Hl7Message, outcome: AckOutcome): 'application' | 'accept' {
  if (ackModeOf(inbound) === 'original') return 'application';
  const accept = acknowledgmentCondition(inbound, 15);
  const application = acknowledgmentCondition(inbound, 16);
  return !wantedBy(accept, outcome) && application !== undefined && wantedBy(application, outcome)
    ? 'application'
    : 'accept';
}

/**
 * Whether the answer is wanted for this outcome: always in original mode; in enhanced mode as
 * the field of the acknowledgment we send asks (table 0155 in MSH-15 for the accept ack,
 * MSH-16 for the application ack: AL always, NE never, ER only on error/reject, SU only on
 * success).
 */
export function acceptAckWanted(inbound: Hl7Message, outcome: AckOutcome): boolean {
  if (ackModeOf(inbound) === 'original') return true;
  const field = ackKindOf(inbound, outcome) === 'accept' ? 15 : 16;
  return wantedBy(acknowledgmentCondition(inbound, field), outcome);
}

/** Table 0155 (MSH-15/16): whether an acknowledgment type asks for an answer to this outcome. */
function wantedBy(type: AcknowledgmentCondition | undefined, outcome: AckOutcome): boolean {
  switch (type ?? 'AL') {
    case 'NE':
      return false;
    case 'ER':
      return outcome !== 'accept';
    case 'SU':
      return outcome === 'accept';
    default:
      return true;
  }
}

/** MSA-1 (table 0008): AA/AE/AR for an application acknowledgment, CA/CE/CR for an accept one. */
export function ackCodeFor(kind: 'application' | 'accept', outcome: AckOutcome): AckCode {
  switch (outcome) {
    case 'accept':
      return kind === 'application' ? 'AA' : 'CA';
    case 'error':
      return kind === 'application' ? 'AE' : 'CE';
    case 'reject':
      return kind === 'application' ? 'AR' : 'CR';
    default:
      return outcome satisfies never;
  }
}

/**
 * One order's application-level answer (HL7 table 0119 in ORC-1): OK accepted, CR canceled
 * as requested, UC unable to cancel, XR changed as requested, UX unable to change.
 */
export interface OrderControlReply {
  control: 'OK' | 'CR' | 'UC' | 'DR' | 'UD' | 'XR' | 'UX';
  /** ORC-2 placer order number (EI components, as the sender wrote them), echoed. */
  placer?: readonly Hl7Component[];
  /** ORC-3 filler order number (EI components): ours when we assigned one. */
  filler?: readonly Hl7Component[];
  /**
   * For an ORI^O24 (the answer to an OMI^O23): the order group's OBR-4 (CWE components) and,
   * per IPC of the group, IPC-1..5 (accession, requested procedure, study, scheduled step:
   * EI components; modality: CWE components), as the sender wrote them. ORI_O24's ORDER group
   * is ORC, [TIMING], OBR, [NTE], [ROL/PRT], {IPC} (v2.5.1 chapter 4 through v2.8): OBR and at
   * least one IPC are required, and OBR-4, IPC-1..4 are required fields.
   */
  imaging?: {
    procedure: readonly Hl7Component[];
    steps: readonly (readonly (readonly Hl7Component[] | undefined)[])[];
  };
}

/**
 * Whether an order reply can be written as a complete ORI_O24 ORDER group: OBR-4 valued and
 * at least one IPC with IPC-1..4 valued. An OMI^O23 that left them out (a lenient sender) is
 * answered with the plain ACK^O23 instead: an ORI without them is invalid for its structure.
 */
function completeForOri(reply: OrderControlReply): boolean {
  const valued = (c: readonly Hl7Component[] | undefined) =>
    (c ?? []).some((x) => (typeof x === 'string' ? x !== '' : (x ?? []).some((s) => !!s)));
  const imaging = reply.imaging;
  return (
    imaging !== undefined &&
    valued(imaging.procedure) &&
    imaging.steps.length > 0 &&
    imaging.steps.every((step) => [0, 1, 2, 3].every((i) => valued(step[i])))
  );
}

export interface AckOptions {
  inbound: Hl7Message;
  outcome: AckOutcome;
  errors?: readonly Hl7ErrorDetail[];
  /**
   * With order replies, an ORM^O01 is answered with ORR^O02 and an OMI^O23 with ORI^O24
   * (v2.5.1 sections 4.4.1, 4.4.5: MSH, MSA, [ERR], then one ORC per order), so the placer
   * learns per order whether a cancel was done (CR) or came too late (UC).
   */
  orderControls?: readonly OrderControlReply[];
  /** MSH-10 of the ACK itself, from an injected generator. */
  controlId: string;
  /** MSH-3 of the ACK when the sender left its MSH-5 empty (default `IMAGING-AI-ADAPTER`). */
  ourApplication?: string;
  now: Date;
}

export interface BuiltAck {
  code: AckCode;
  text: string;
  /** Encoded as the inbound message was decoded (MSH-18 echoed). */
  bytes: Buffer;
}

/**
 * A control ID for an acknowledgment of ours (MSH-10, ST): 20 hexadecimal characters, the
 * length MSH-10 has in v2.3 to v2.5.1 (199 from v2.6), as random as a UUID's 122 bits need not
 * be for one sender's answers. A whole UUID (36) overflowed the field in every ACK to a
 * v2.5.1 or older sender that our MLLP server answered itself (AR 207 when the handler failed).
 */
export function newAckControlId(): string {
  return randomUUID().replace(/-/g, '').slice(0, 20);
}

/** MSA-3 text message, ST of length 80 in every version that has it (v2.1-2.6; chapter 2). */
const MSA_3_LENGTH = 80;

/**
 * MSA-3 for an error: its sentence when that fits the field's 80 characters as encoded, else
 * its brief (the advice first), cut to the length (escapeWithin) either way; the whole
 * sentence stays in the audit record. Before, every sentence was cut at 80, and the advice at
 * its end was lost (`... Send a change as XO, or cancel (CA) and order again (NW) under a new
 * number` came back as `... it already names this patient's order with ano`).
 */
function msa3Text(error: Hl7ErrorDetail, d: Hl7Delimiters): string {
  const cut = escapeWithin(error.message, MSA_3_LENGTH, d);
  const fits = cut === escapeValue(error.message, d);
  return fits || !error.brief ? cut : escapeWithin(error.brief, MSA_3_LENGTH, d);
}

/** Versions whose MSH-9 has no third component (message structure, added in v2.3.1). */
const VERSIONS_BEFORE_MSH_9_3 = ['2.0', '2.0D', '2.1', '2.2', '2.3'];

/**
 * MSH-12 of our answer: the sender's version when it is one (table 0104), so the sender reads
 * the ACK as it writes; otherwise (`3.0`, `ABC`, a typo) our own, 2.5.1, as for a message with no
 * readable header: an answer must carry a valid VID, and echoing the sender's text made our ACK
 * as unreadable as its message (its ERR in no version's layout).
 */
export function ackVersionFor(inboundVersion: string): string {
  return (HL7_VERSION_IDS as readonly string[]).includes(inboundVersion) ? inboundVersion : '2.5.1';
}

/**
 * MSH-9.2 of our ACK (ID, table 0003): the event of the message answered, so the sender can
 * match it; written in the table's case (`o01` is O01, refused AR 201 for its case), and left
 * empty when the sender's text is no event code (`O0<1>`, `O01` with a CR in it): every table
 * 0003 event is three characters, a letter then letters or digits. Before, the text was echoed.
 */
function ackTrigger(inbound: string): string | undefined {
  const event = inbound.toUpperCase();
  return /^[A-Z][A-Z0-9]{2}$/.test(event) ? event : undefined;
}

/** HL7 table 0103 (processing ID): debugging, production, training. */
const TABLE_0103 = ['D', 'P', 'T'];

/**
 * MSH-11.1 of our answer (PT, table 0103): the sender's processing ID, so a training message
 * is answered as training; written in the table's case (`t` is T: the same ID, refused AR 202
 * for its case), and P when the sender's is no code at all (`production`, `X`: refused AR
 * 202). Before, such text was echoed, and the AR was as invalid as the header it refused.
 */
function ackProcessingId(inbound: string): string {
  const id = inbound.trim().toUpperCase();
  return TABLE_0103.includes(id) ? id : 'P';
}

const ERR_LOCATION_SINCE = ['2.5', '2.5.1', '2.6', '2.7', '2.7.1', '2.8', '2.8.1', '2.8.2'];

/** v2.5 replaced ERR-1 (ELD) by ERR-2..ERR-12 (v2.5 chapter 2, ERR segment); older versions use ERR-1. */
export function usesErrLocationFields(version: string): boolean {
  if (ERR_LOCATION_SINCE.includes(version)) return true;
  const [major, minor] = version.split('.').map(Number);
  return major === 2 && minor >= 5;
}

/** Versions whose ERR-7 (TX) and ERR-8 (TX) have a maximum length; v2.7 dropped both. */
const ERR_TEXT_LENGTHS: Readonly<Record<string, { diagnostic: number; user: number }>> = {
  '2.5': { diagnostic: 2048, user: 250 },
  '2.5.1': { diagnostic: 2048, user: 250 },
  '2.6': { diagnostic: 2048, user: 250 },
};

/**
 * ERR-7 and ERR-8 for one error's text: ERR-8 user message alone when the text fits it (or the
 * version sets no length); otherwise ERR-8 cut to its length (v2.5-2.6 chapter 2: TX 250) and
 * the whole text, up to its 2048, in ERR-7 diagnostic information, the field meant for support
 * staff. Before, a long text (the MSH-2 refusal, 270 characters) overflowed ERR-8.
 */
function userMessage(
  message: string,
  version: string,
  d?: Hl7Delimiters,
): [Hl7FieldValue, Hl7FieldValue] {
  const lengths = ERR_TEXT_LENGTHS[version];
  if (!lengths) return [undefined, message];
  const whole = escapeWithin(message, lengths.diagnostic, d);
  const user = escapeWithin(message, lengths.user, d);
  return user === whole ? [undefined, { encoded: user }] : [{ encoded: whole }, { encoded: user }];
}

function errSegment(error: Hl7ErrorDetail, version: string, d: Hl7Delimiters): Hl7SegmentSpec {
  const loc = error.location ? parseLocation(error.location) : undefined;
  const text = HL7_ERROR_CONDITIONS[error.code];
  if (usesErrLocationFields(version)) {
    // ERR-2 ERL: segment ID ^ sequence ^ field ^ field repetition ^ component ^ subcomponent.
    const erl = loc
      ? [
          loc.segment,
          String(loc.segmentOrdinal ?? 1),
          String(loc.field),
          String(loc.repetition ?? 1),
          loc.component === undefined ? undefined : String(loc.component),
          loc.subcomponent === undefined ? undefined : String(loc.subcomponent),
        ]
      : undefined;
    return {
      id: 'ERR',
      fields: [
        undefined, // ERR-1 (ELD) is backward-compatible only in 2.5/2.6 and withdrawn since 2.7
        erl, // ERR-2 error location
        [String(error.code), text, 'HL70357'], // ERR-3 HL7 error code (CWE, table 0357)
        error.severity, // ERR-4 severity (table 0516)
        undefined,
        undefined,
        ...userMessage(error.message, version, d), // ERR-7 diagnostic information, ERR-8 user message
      ],
    };
  }
  // v2.3/v2.4 ERR-1 (CM/ELD): segment ID ^ sequence ^ field position ^ code identifying error,
  // the last a CE written with subcomponents (code & text & coding system). There is no user
  // message field before v2.5: the text travels in MSA-3.
  return {
    id: 'ERR',
    fields: [
      [
        loc?.segment,
        loc ? String(loc.segmentOrdinal ?? 1) : undefined,
        loc ? String(loc.field) : undefined,
        [String(error.code), text, 'HL70357'],
      ],
    ],
  };
}

/**
 * The ERR of an answer: one per problem from v2.5 (ACK and ORR/ORI `[{ERR}]`); before v2.5 the
 * answer holds one ERR (ACK_, ORR_O02: MSH, MSA, [ERR]) whose ERR-1 (ELD) repeats, one
 * repetition per problem. Before, a v2.3/2.4 answer had one ERR segment per problem, a
 * structure a validating v2.3.1 RIS cannot read past the first.
 */
function errSegments(
  errors: readonly Hl7ErrorDetail[],
  version: string,
  d: Hl7Delimiters,
): Hl7SegmentSpec[] {
  const segments = errors.map((e) => errSegment(e, version, d));
  if (usesErrLocationFields(version) || segments.length < 2) return segments;
  return [
    {
      id: 'ERR',
      fields: [{ repetitions: segments.map((s) => s.fields[0] as readonly Hl7Component[]) }],
    },
  ];
}

/**
 * Builds the acknowledgment of an inbound message (HL7 v2.5.1 sections 2.9.2-2.9.3, ACK message):
 * MSH with sender and receiver swapped (MSH-3/4 <-> MSH-5/6), its own control ID, the inbound
 * processing ID (MSH-11), version (MSH-12) and charset (MSH-18); MSA-1 the code, MSA-2 the
 * inbound MSH-10; one ERR per problem in the layout of the inbound version.
 */
export function buildAck(options: AckOptions): BuiltAck {
  const { inbound, outcome, controlId, now } = options;
  const msh = inbound.msh;
  const code = ackCodeFor(ackKindOf(inbound, outcome), outcome);
  const version = ackVersionFor(inbound.version);
  const modern = usesErrLocationFields(version);
  // Before v2.5 ERR has no severity: a warning would read as an error, so only errors are sent
  // (warnings stay in the audit record).
  const errors = (options.errors ?? []).filter((e) => modern || e.severity === 'E');
  const trigger = ackTrigger(inbound.messageType.trigger);
  const inboundCode = inbound.messageType.code.toUpperCase();
  const orderReply =
    options.orderControls &&
    options.orderControls.length > 0 &&
    (inboundCode === 'ORM' ||
      (inboundCode === 'OMI' && options.orderControls.every(completeForOri)))
      ? inboundCode === 'ORM'
        ? { code: 'ORR', trigger: 'O02', structure: 'ORR_O02' }
        : { code: 'ORI', trigger: 'O24', structure: 'ORI_O24' }
      : undefined;
  // MSH-9.3 message structure exists since v2.3.1.
  const noStructure = VERSIONS_BEFORE_MSH_9_3.includes(version);
  const messageType = orderReply
    ? noStructure
      ? [orderReply.code, orderReply.trigger]
      : [orderReply.code, orderReply.trigger, orderReply.structure]
    : noStructure
      ? ['ACK', trigger]
      : ['ACK', trigger, 'ACK'];
  // The HD of each side whole (v2.5.1 §2.9.2, §2.15.9.3-6): every component and subcomponent
  // the sender wrote, e.g. `RIS^1.2.3.4^ISO` or `RIS&1.2.3.4&ISO`. Before, only the first
  // subcomponent of components 1-3 came back (`RIS`), and a RIS that names itself by OID
  // did not recognise the answer as meant for it.
  // HD has three components (v2.5.1 2A.3.36): a fourth or fifth the sender wrote is no part
  // of it, and went out as an HD a validating engine refuses.
  // One longer than an HD holds (227: MSH-3/4 refused AR 102 for it, MSH-5/6 not read) is not
  // echoed: cut, it would name another application; before, an AR for a 3,000-character MSH-3
  // wrote it back whole in MSH-5.
  const hd = (field: number): string[][] | undefined =>
    [...msh.rawField(field)].length > HD_MAX_CHARS ? undefined : msh.structure(field).slice(0, 3);
  // MSH-18 (ID, table 0211): the sender's charset as the table names it (`unicode utf-8` is
  // UNICODE UTF-8, `ISO_IR 100` 8859/1); a charset the table has no value for but that we
  // read and write (`CP1250`) by the sender's name for it, the bytes we answer in; none for
  // text that names no charset. Before, the sender's text was echoed whatever it was (`FOO
  // BAR`, an escaped `8859/1\S\x`), a value a validating engine refuses.
  // A value of a later version's table (`8859/15` from a v2.4 sender) is not echoed either:
  // none when the ACK is ASCII, else the charset its version names (ackCharset). Before, it
  // went back as the sender wrote it, a value its version's table 0211 does not define.
  const declared = inbound.declaredCharset.trim();
  const named = declared
    ? namesTable0211Value(declared)
      ? table0211Value(declared, version)
      : charsetLabel(declared) !== undefined
        ? declared
        : undefined
    : undefined;
  const segmentsFor = (charset: string | undefined): Hl7SegmentSpec[] => [
    {
      id: 'MSH',
      fields: [
        // MSH-3 sending application = inbound receiving application; many senders leave MSH-5
        // empty, and an ACK must still say who answers (v2.5.1 §2.9.2: MSH-3 is ours)
        (hd(5) ?? []).every((c) => c.every((v) => v === '' || v === '""'))
          ? (options.ourApplication ?? 'IMAGING-AI-ADAPTER')
          : hd(5),
        hd(6), // MSH-4
        hd(3), // MSH-5 receiving application = inbound sending application
        hd(4), // MSH-6
        formatHl7Timestamp(now), // MSH-7
        undefined, // MSH-8
        messageType, // MSH-9
        controlId, // MSH-10
        ackProcessingId(inbound.processingId), // MSH-11
        version, // MSH-12
        undefined, // MSH-13
        undefined, // MSH-14
        undefined, // MSH-15: an acknowledgment is never acknowledged
        undefined, // MSH-16
        undefined, // MSH-17
        charset || undefined, // MSH-18
      ],
    },
    {
      id: 'MSA',
      fields: [
        code,
        // MSA-2 is the sender's MSH-10 exactly (v2.5.1 §2.9.2): its text as written, also a
        // control ID holding a component or subcomponent separator (`20240318^0001`), not only
        // its first part, and a v2.7 truncation character (`8817261#02`; unescaped and escaped
        // again it came back `8817261\P\02`, an answer to no message). The ACK uses the
        // sender's delimiters, so the text means what it meant in MSH-10. A control character
        // there (a NUL) is still written as hexadecimal data, never sent as a byte.
        // A lone escape character (a sender that does not escape its backslashes) is written
        // `\E\`, the text it was read as; before, it went back raw, an escape sequence left open
        // in our answer. Over the 199 characters of MSA-2 (ST; refused AR 102 at MSH-10), its
        // first 199.
        {
          encoded: cutEncoded(
            closedEscapes(msh.rawField(10), inbound.delimiters),
            CONTROL_ID_MAX_CHARS,
            inbound.delimiters.escape,
          ),
        },
        // MSA-3 text message (ST, 80 in v2.1-2.4): deprecated since v2.4 in favour of ERR,
        // withdrawn in v2.7, so written only before v2.5, where ERR has no user message.
        !modern && outcome !== 'accept' && errors.length > 0
          ? { encoded: msa3Text(errors[0], inbound.delimiters) }
          : undefined,
      ],
    },
    ...errSegments(errors, version, inbound.delimiters),
    ...(orderReply
      ? (options.orderControls ?? []).flatMap((o, i): Hl7SegmentSpec[] => {
          const placer = o.placer ? [...o.placer] : undefined;
          const filler = o.filler ? [...o.filler] : undefined;
          const orc: Hl7SegmentSpec = { id: 'ORC', fields: [o.control, placer, filler] };
          if (orderReply.code !== 'ORI' || !o.imaging) return [orc];
          // ORI_O24 ORDER: ORC, OBR (OBR-1 set ID, -2/-3 the order's numbers, -4 required),
          // one IPC per scheduled step of the order as the OMI named it
          return [
            orc,
            { id: 'OBR', fields: [String(i + 1), placer, filler, [...o.imaging.procedure]] },
            ...o.imaging.steps.map((step): Hl7SegmentSpec => ({
              id: 'IPC',
              fields: step.map((f) => (f ? [...f] : undefined)),
            })),
          ];
        })
      : []),
  ];
  const first = encodeMessage(segmentsFor(named), inbound.delimiters);
  const charset = ackCharset(named, first, inbound.encoding, version);
  const text = charset === named ? first : encodeMessage(segmentsFor(charset), inbound.delimiters);
  return { code, text, bytes: encodeText(text, charset ?? '', inbound.encoding) };
}

/**
 * Raw field text as the sender wrote it, but for what no field of ours may hold: a control
 * character (written as hexadecimal data, `\X00\`) and an escape character that opens no
 * sequence in its component (read as text, written `\E\`). Everything else, escapes and
 * separators included, stays as written.
 */
function closedEscapes(raw: string, d: Hl7Delimiters): string {
  const structural = new Set([d.component, d.repetition, d.subcomponent]);
  const hexed = (c: string) => (c < ' ' || c === '\u007f' ? escapeValue(c, d) : c);
  let out = '';
  for (let i = 0; i < raw.length; i += 1) {
    const c = raw[i]!;
    if (c !== d.escape) {
      out += hexed(c);
      continue;
    }
    let close = i + 1;
    while (close < raw.length && raw[close] !== d.escape && !structural.has(raw[close]!))
      close += 1;
    const body = raw.slice(i + 1, close);
    // a control character inside is no sequence either: its hexadecimal data would nest
    // eslint-disable-next-line no-control-regex
    if (raw[close] !== d.escape || /[\u0000-\u001f\u007f]/.test(body)) {
      out += `${d.escape}E${d.escape}`;
      continue;
    }
    out += d.escape + body + d.escape;
    i = close;
  }
  return out;
}

/**
 * Field text as encoded, at most `max` characters (code points), cut between whole characters
 * and never inside an escape sequence (a cut `\X0D` would read as a stray escape character).
 */
function cutEncoded(text: string, max: number, escape: string): string {
  const chars = [...text];
  if (chars.length <= max) return text;
  let cut = chars.slice(0, max);
  const escapes = cut.filter((c) => c === escape).length;
  if (escapes % 2 === 1) cut = cut.slice(0, cut.lastIndexOf(escape));
  return cut.join('');
}

/** Printable and control ASCII: the same bytes in every charset we write. */
// eslint-disable-next-line no-control-regex -- the whole ASCII range
const ASCII_ONLY = /^[\u0000-\u007f]*$/;

/**
 * MSH-18 of our ACK, so that its bytes are what it declares (v2.5.1 §2.15.9.18: MSH-18 names
 * the character set of the whole message; empty means ASCII). The sender's charset (`named`)
 * when the ACK is ASCII or can be written in it (`writesAs`: UTF-8, an ISO 8859 part, a code
 * page); else the charset its message was read in, when table 0211 names one we write (a
 * sender that declared none or ASCII and wrote Latin-1 gets 8859/1 and its own bytes back),
 * else UTF-8. Before, the ACK was written in the bytes the message was decoded with whatever
 * MSH-18 said: a header of Latin-1 bytes under `UNICODE UTF-8` came back as Latin-1 under
 * `UNICODE UTF-8` (not UTF-8, refused or garbled by the sender's decoder), UTF-8 names under
 * `ASCII` or no MSH-18 as 8-bit bytes, and names read in GB 18030 as UTF-8 under
 * `GB 18030-2000`.
 */
function ackCharset(
  named: string | undefined,
  text: string,
  readWith: string,
  version: string,
): string | undefined {
  if (ASCII_ONLY.test(text)) return named;
  if (named !== undefined && writesAs(named, text)) return named;
  const read = table0211Value(readWith, version);
  if (read !== undefined && writesAs(read, text)) return read;
  return table0211Value('UTF-8', version);
}

export interface UnparseableAckOptions {
  /** The bytes received, as they came. */
  raw: Buffer;
  /** Why no message could be read, for ERR-8. */
  reason: string;
  /** The MSH field that made the header unreadable (1 or 2), when known, for ERR-2. */
  mshField?: number;
  /** MSH-3 and MSH-4 of the answer (there is no inbound header to mirror). */
  ourApplication: string;
  ourFacility: string;
  now: Date;
  controlId: string;
}

/**
 * The AR for bytes with no usable MSH: our own header (v2.5.1, ACK), MSA-2 echoing MSH-10
 * when it can be found by the field separator alone (section 2.9.2, so the sender can match
 * it), and ERR 100 (table 0357 "Segment sequence error") at MSH-1, or ERR 102 ("Data type
 * error") at MSH-2 when the encoding characters are what is wrong (the text says how).
 */
export function buildUnparseableAck(options: UnparseableAckOptions): Buffer {
  const text = encodeMessage([
    {
      id: 'MSH',
      fields: [
        options.ourApplication,
        options.ourFacility,
        undefined,
        undefined,
        formatHl7Timestamp(options.now),
        undefined,
        ['ACK'],
        options.controlId,
        'P',
        '2.5.1',
      ],
    },
    { id: 'MSA', fields: ['AR', salvageControlId(options.raw) ?? ''] },
    {
      id: 'ERR',
      fields: [
        undefined,
        ['MSH', '1', String(options.mshField ?? 1)],
        // a malformed MSH-2 is a field in the wrong form (102); no readable header at all, 100
        options.mshField === 2
          ? ['102', 'Data type error', 'HL70357']
          : ['100', 'Segment sequence error', 'HL70357'],
        'E',
        undefined,
        undefined,
        ...userMessage(`Not an HL7 v2 message: ${options.reason}`, '2.5.1'),
      ],
    },
  ]);
  return Buffer.from(text, 'latin1');
}
