import { acknowledgmentCondition, AckOutcome, Hl7ErrorDetail, TABLE_0155 } from './hl7-ack.builder';
import { Hl7Message } from './hl7-message';
import { CONTROL_ID_MAX_CHARS, HD_MAX_CHARS } from './hl7-echo-lengths';
import { quotedCode } from './hl7-quoted';
import { HL7_VERSION_IDS } from './hl7-versions';

/** Message types and trigger events this adapter accepts (everything else: AR 200/201). */
export const SUPPORTED_MESSAGES: Readonly<Record<string, readonly string[]>> = {
  ORM: ['O01'], // v2.3-2.4 general order (chapter 4); kept in later versions for radiology
  OMI: ['O23'], // imaging order (v2.5+ chapter 4, IHE RAD-4/RAD-13 in 2.5.1)
  // update patient information (A08: IHE PAM ITI-31; A31, update person information: the
  // ITI-30 identity feed's); merge patient - patient identifier list; change patient
  // identifier list (IHE PAM ITI-30: a temporary or wrong record number corrected)
  ADT: ['A08', 'A31', 'A40', 'A47'],
};

/**
 * What the refusal of another type says is taken: an EHR sending its imaging orders as the
 * general clinical order OMG^O19 (v2.5.1 §4.4.10) was told only "Message type OMG not
 * supported", not that the same order goes as OMI^O23 or ORM^O01.
 */
const TAKEN_MESSAGES = Object.entries(SUPPORTED_MESSAGES)
  .flatMap(([code, triggers]) => triggers.map((t) => `${code}^${t}`))
  .join(', ');

/**
 * The same, as short as an MSA-3 (80 characters, each `^` escaped as `\S\`) lets the advice
 * and what was refused both be read: the triggers of one type joined (`ADT^A08/A31/A40/A47`).
 * The list written out whole cut the brief's end off a v2.3 ACK once it named five messages.
 */
const TAKEN_BRIEF = Object.entries(SUPPORTED_MESSAGES)
  .map(([code, triggers]) => `${code}^${triggers.join('/')}`)
  .join(', ');

/** MSH-12 values accepted: v2.3 to v2.8.2 (of table 0104). */
export const SUPPORTED_VERSIONS = HL7_VERSION_IDS.slice(
  HL7_VERSION_IDS.indexOf('2.3'),
  HL7_VERSION_IDS.indexOf('2.8.2') + 1,
);

export interface StructureCheckOptions {
  /** MSH-11.1 values accepted (table 0103: P production, T training, D debugging). */
  allowedProcessingIds: readonly string[];
}

export const DEFAULT_STRUCTURE_CHECK_OPTIONS: StructureCheckOptions = {
  allowedProcessingIds: ['P'],
};

export interface StructureCheckResult {
  outcome: AckOutcome;
  errors: Hl7ErrorDetail[];
}

/**
 * Header and structure checks that decide between AR (the message cannot be processed here at
 * all: HL7 v2.5.1 section 2.9.2 "reject") and going on to the content mapping:
 * required MSH fields (section 2.15.9: MSH-1, -2, -7, -9, -10, -11, -12), supported type/trigger,
 * processing ID, version; and, for orders, at least one ORC or OBR (AE 100).
 */
export function checkStructure(
  message: Hl7Message,
  options: StructureCheckOptions = DEFAULT_STRUCTURE_CHECK_OPTIONS,
): StructureCheckResult {
  const errors: Hl7ErrorDetail[] = [];
  const msh = message.msh;
  const reject = (e: Hl7ErrorDetail): StructureCheckResult => ({
    outcome: 'reject',
    errors: [...errors, e],
  });

  // A message over the parser's bounds is refused whole (AR), naming where: never truncated,
  // never mapped (issue #15: bounded work per message, whatever the sender put in). So is one
  // with a line the parser could not place (shaped like a segment, no segment ID): 100.
  if (message.limitViolations.length > 0) {
    return {
      outcome: 'reject',
      errors: message.limitViolations.map((v) => ({
        ...(v.location === undefined ? {} : { location: v.location }),
        code: v.kind === 'segments' || v.kind === 'segment-id' ? 100 : 102,
        severity: 'E' as const,
        message: v.message,
        ...(v.brief === undefined ? {} : { brief: v.brief }),
      })),
    };
  }
  // One message per MLLP frame: a second MSH is another message, not segments of this one
  // (its orders would be filed under this message's patient). A batch has FHS/BHS.
  const second = message.segmentsById('MSH')[1];
  if (second) {
    return reject({
      location: `MSH[2]-1`,
      code: 100,
      severity: 'E',
      message:
        'A second MSH in one frame: send one message per frame, or wrap them in a batch (BHS ... BTS)',
      brief: 'Send one message per frame, or a batch (BHS ... BTS): a second MSH in one frame',
    });
  }
  // MSH-3 and MSH-4 name the sender (HD: 227 characters in v2.7): every message of the sender
  // is filed and de-duplicated under them. A random 8,000-character MSH-3 passed the largest
  // row a PostgreSQL index holds; the store failed and the sender was told to resend, for ever.
  for (const field of [3, 4]) {
    const length = [...message.msh.rawField(field)].length;
    if (length > HD_MAX_CHARS) {
      return reject({
        location: `MSH-${field}`,
        code: 102,
        severity: 'E',
        message: `MSH-${field} is ${length} characters, more than the ${HD_MAX_CHARS} of an HD (v2.7)`,
        brief: `Send the application/facility name: MSH-${field} is ${length} characters (HD: ${HD_MAX_CHARS})`,
      });
    }
  }
  // MSH-10 (ST, 199 since v2.6) is echoed in our MSA-2 and keys the sender's duplicates: a
  // control ID of thousands of characters (a misconfigured engine, a hostile peer) was taken and
  // answered AA with an MSA-2 as long, a value no version's MSA-2 holds. Refused, the AR's
  // MSA-2 its first 199 characters.
  const controlIdLength = [...msh.rawField(10)].length;
  if (controlIdLength > CONTROL_ID_MAX_CHARS) {
    return reject({
      location: 'MSH-10',
      code: 102,
      severity: 'E',
      message: `MSH-10 is ${controlIdLength} characters, more than the ${CONTROL_ID_MAX_CHARS} of a message control ID (ST); send the message with a control ID of at most ${CONTROL_ID_MAX_CHARS}`,
      brief: `Send a control ID of at most ${CONTROL_ID_MAX_CHARS}: MSH-10 is ${controlIdLength} characters`,
    });
  }
  if (!message.controlId) {
    // Required by the standard, but some senders leave it empty: we take the message (it is
    // de-duplicated by a hash of its bytes instead) and say so.
    errors.push({
      location: 'MSH-10',
      code: 101,
      severity: 'W',
      message: 'MSH-10 missing: duplicates are recognised by the message content',
    });
  }
  const type = message.messageType;
  if (!type.code || !type.trigger) {
    return reject({ location: 'MSH-9', code: 101, severity: 'E', message: 'MSH-9 incomplete' });
  }
  if (!message.processingId) {
    return reject({ location: 'MSH-11', code: 101, severity: 'E', message: 'MSH-11 missing' });
  }
  if (!message.version) {
    return reject({ location: 'MSH-12', code: 101, severity: 'E', message: 'MSH-12 missing' });
  }
  if (msh.value(7) === undefined) {
    // Required, but nothing here depends on it: answer, with a warning.
    errors.push({ location: 'MSH-7', code: 101, severity: 'W', message: 'MSH-7 missing' });
  }
  if (!(SUPPORTED_VERSIONS as readonly string[]).includes(message.version)) {
    return reject({
      location: 'MSH-12',
      code: 203,
      severity: 'E',
      message: `Version ${quotedCode(message.version)} not supported (2.3 to 2.8)`,
      // MSH-12 is the sender's text, of any length: the brief does not repeat it
      brief: 'Send HL7 version 2.3 to 2.8 in MSH-12: this version is not supported',
    });
  }
  // Coded values are case-sensitive (tables 0076, 0003, 0103): `orm` is not ORM. A sender
  // writing lower case is told so, not read leniently.
  const triggers = SUPPORTED_MESSAGES[type.code];
  if (!triggers) {
    return reject({
      location: 'MSH-9.1',
      code: 200,
      severity: 'E',
      message: `Message type ${quotedCode(type.code)} not supported${caseHint(type.code, Object.keys(SUPPORTED_MESSAGES), '0076')}; this receiver takes ${TAKEN_MESSAGES}`,
      brief: caseBrief(
        `Message type ${quotedCode(type.code)}`,
        type.code,
        Object.keys(SUPPORTED_MESSAGES),
        '0076',
      ),
    });
  }
  if (!triggers.includes(type.trigger)) {
    return reject({
      location: 'MSH-9.2',
      code: 201,
      severity: 'E',
      message: `Event ${quotedCode(type.code)}^${quotedCode(type.trigger)} not supported${caseHint(type.trigger, triggers, '0003')}; this receiver takes ${TAKEN_MESSAGES}`,
      brief: caseBrief(
        `Event ${quotedCode(type.code)}^${quotedCode(type.trigger)}`,
        type.trigger,
        triggers,
        '0003',
      ),
    });
  }
  const structure = expectedStructure(type.code, type.trigger);
  if (type.structure !== undefined && type.structure !== structure) {
    // Segments are read by their IDs, whatever MSH-9.3 says; senders that write e.g.
    // ADT_A08 are common, so this is a warning, not a refusal.
    errors.push({
      location: 'MSH-9.3',
      code: 200,
      severity: 'W',
      message: `Message structure ${quotedCode(type.structure ?? '')} does not fit ${type.code}^${type.trigger} (table 0354: ${structure}); read as ${structure}`,
    });
  }
  if (!options.allowedProcessingIds.includes(message.processingId)) {
    return reject({
      location: 'MSH-11',
      code: 202,
      severity: 'E',
      message: `Processing ID ${quotedCode(message.processingId)} not accepted here${caseHint(message.processingId, options.allowedProcessingIds, '0103')}`,
      brief: `Send MSH-11 as ${options.allowedProcessingIds.join(' or ')}: this processing ID is not accepted here`,
    });
  }
  // MSH-15/MSH-16 (table 0155) decide which answer the sender gets: a value outside the table
  // asks for nothing, so it is read as empty (original mode when both are) and said here.
  for (const field of [15, 16] as const) {
    const sent = msh.code(field);
    if (sent !== undefined && acknowledgmentCondition(message, field) === undefined) {
      errors.push({
        location: `MSH-${field}`,
        code: 103,
        severity: 'W',
        message: `MSH-${field} ${quotedCode(sent)} is not in HL7 table 0155 (AL, NE, ER, SU)${caseHint(sent, TABLE_0155, '0155')}; read as empty`,
        brief: `Send MSH-${field} as AL, NE, ER or SU: the value sent is read as empty`,
      });
    }
  }
  if (!message.charsetKnown) {
    errors.push({
      location: 'MSH-18',
      code: 103,
      severity: 'W',
      message: `Character set ${quotedCode(message.declaredCharset)} unknown; decoded as best effort`,
    });
  }
  const isOrder = type.code === 'ORM' || type.code === 'OMI';
  if (isOrder && message.orderGroups().length === 0) {
    errors.push({ code: 100, severity: 'E', message: 'No ORC/OBR order group in order message' });
    return { outcome: 'error', errors };
  }
  if (!isOrder && !message.segment('PID')) {
    errors.push({ code: 100, severity: 'E', message: 'PID segment missing' });
    return { outcome: 'error', errors };
  }
  return { outcome: 'accept', errors };
}

/** ", codes are case-sensitive (table …): X" when `value` differs from a known code only in case. */
function caseHint(value: string, known: readonly string[], table: string): string {
  const match = caseMatch(value, known);
  return match ? ` (HL7 table ${table} codes are case-sensitive: ${match})` : '';
}

function caseMatch(value: string, known: readonly string[]): string | undefined {
  return known.find((k) => k !== value && k.toUpperCase() === value.toUpperCase());
}

/**
 * The MSA-3 form (80 characters) of a message type or event refusal: the code to write when
 * only its case was wrong, else the messages taken before the code refused.
 */
function caseBrief(what: string, value: string, known: readonly string[], table: string): string {
  const hint = caseHint(value, known, table);
  return hint
    ? `${what} not supported${hint}`
    : `Send ${TAKEN_BRIEF}: ${what.charAt(0).toLowerCase()}${what.slice(1)} not taken`;
}

/**
 * MSH-9.3 (table 0354) of each supported message. ADT^A08 shares ADT_A01 and ADT^A40 is
 * ADT_A39 from v2.3.1 on.
 */
const MESSAGE_STRUCTURES: Readonly<Record<string, string>> = {
  'ORM^O01': 'ORM_O01',
  'OMI^O23': 'OMI_O23',
  'ADT^A08': 'ADT_A01',
  'ADT^A31': 'ADT_A05',
  'ADT^A40': 'ADT_A39',
  'ADT^A47': 'ADT_A30',
};

function expectedStructure(code: string, trigger: string): string {
  return MESSAGE_STRUCTURES[`${code}^${trigger}`] ?? `${code}_${trigger}`;
}
