import {
  encodeField,
  encodeSegment,
  formatHl7Timestamp,
  isoToHl7Dtm,
  type Hl7Component,
  type Hl7FieldValue,
  type Hl7SegmentSpec,
} from '../hl7/hl7-builder';
import { hdOf, hl7CodingSystem } from './coding-systems.table';
import { charsetLabel, isValidUtf8, table0211Value, writesAs } from '../hl7/hl7-charset';
import { boundedEi } from '../hl7/hl7-echo-lengths';
import {
  DEFAULT_DELIMITERS,
  escapeValue,
  flattenFormatting,
  recodeHexData,
  transcodeRaw,
} from '../hl7/hl7-escape';
import { formattingModeOf } from '../hl7/hl7-formatting';
import type { Hl7Message } from '../hl7/hl7-message';
import type { Hl7Segment } from '../hl7/hl7-segment';
import type { Hl7ResultSettings } from './hl7-result.mapping';
import type { PublicationInput } from './publication.model';
import { boundedText, oneLine } from './result-content.mapping';
import { hl7DateOf } from './hl7-value.dates';
import { withValidEchoes } from './hl7-result.echo';
import { TABLE_0001_SEX } from './hl7-code.tables';
import type { AdministrativeSex, Identifier, PersonName } from '../domain/order-request';
import { pgSafeDeep } from '../common/pg-safe';
import { noResultPhrase } from './local-end-reasons';

/**
 * The segments of our result and status messages around the observations: MSH, PID, PV1,
 * ORC and OBR (HL7 v2.5.1 chapters 2, 3, 4 and 7), from the publication and the original order.
 */

/** MSH-18 of a message in UTF-8, said explicitly. */
export const UTF8_CHARSET = 'UNICODE UTF-8';

/**
 * MSH-18 naming `charset` in the message's own version of table 0211: `UNICODE UTF-8` entered
 * the table in v2.5; v2.3 to v2.4 have `UNICODE` (ISO 10646), what a RIS of that version reads
 * as UTF-8 (as we do). A v2.3.1 RIS was told `UNICODE UTF-8`, a value its table lacks. The
 * order's own MSH-18 as the table spells it (MSH-18 is an ID of table 0211, as in our ACK): an
 * engine's `UTF-8`, DICOM's `ISO_IR 192` or `ISO_IR 100`, a lowercase `unicode utf-8` went
 * back as written, values a RIS validating MSH-18 refuses; a charset the table has no value
 * for but that we write (`CP1250`) keeps the sender's name.
 */
function msh18For(charset: string, version: string): string {
  if (charset === UTF8_CHARSET && !versionAtLeast(version, '2.5')) return 'UNICODE';
  return table0211Value(charset, version) ?? charset;
}

/**
 * MSH-18 of what we send: the order's own character set when it declared one we can write
 * (the RIS reads its own messages' charset, e.g. 8859/1), else UTF-8, said explicitly. A
 * multi-byte charset (`GB 18030-2000`, `KS X 1001`, `BIG-5`) has no encoder here: before, its
 * name went out in MSH-18 over UTF-8 bytes, and a RIS decoding by MSH-18 read 王小明 as 鐜嬪皬鏄�. The
 * message builder also writes UTF-8 when the text holds what the declared charset cannot
 * (`writesAs`: ASCII with a name an order sent in 8-bit bytes).
 */
export function charsetFor(original: Hl7Message | undefined): string {
  const declared = original?.msh.value(18);
  return declared && writesAs(declared, '') ? declared : UTF8_CHARSET;
}

/**
 * A segment's fields by their numbers (`{ 1: …, 16: … }`), the fields between left empty;
 * `first` is the number of fields[0] (3 for MSH, whose first two fields are the delimiters).
 */
export function numberedFields(
  values: Readonly<Record<number, Hl7FieldValue>>,
  first = 1,
): Hl7FieldValue[] {
  const last = Math.max(first - 1, ...Object.keys(values).map(Number));
  return Array.from({ length: last - first + 1 }, (_, i) => values[first + i]);
}

/** Local coding system of our OBX-3 codes (HL7 table 0396 `99zzz` local), beside DCM and LN. */
export const LOCAL = '99IAA';

export function versionAtLeast(version: string, min: string): boolean {
  const a = version.split('.').map(Number);
  const b = min.split('.').map(Number);
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return d > 0;
  }
  return true;
}

/**
 * A segment of the original message, written with our delimiters (v2.5.1 section 2.5): each
 * field transcoded from the sender's MSH-1/MSH-2, so a sender with other encoding characters
 * (`|!~\&`, or the v2.7 truncation character `#` whose `\P\` means nothing under our
 * MSH-2) keeps its PID/PV1, repetitions and assigning authorities included, every value
 * meaning what it meant (a field the intake does not read, e.g. PID-29, only when valid for
 * its type: hl7-result.echo.ts). Before, such a segment was copied raw when the four usual
 * characters matched (the sender's `\P\` went out as is) and otherwise dropped: PID rebuilt
 * from the order model, PV1 `PV1|1|U`. Control characters the sender left raw (a NUL, or an
 * FS that would end the RIS's MLLP frame inside our ORU) go out as hexadecimal data, and the
 * order's own hexadecimal data names bytes of its charset: when ours differs (an ASCII order
 * without MSH-18 writing é as \XE9\, answered in UTF-8) it is written as text. Formatting
 * commands (\.br\ \.sp\ \H\ ...; v2.5.1 §2.7.6, FT only) in a field of another type are
 * written as the order was read (hl7-formatting.ts): before, PID-5 `MEIER\.br\JR` went back
 * as written though the order held `MEIER JR`, a line break in the name for a RIS rendering it.
 */
function originalSegment(
  original: Hl7Message | undefined,
  id: string,
  charset: string,
): string | undefined {
  const seg = original?.segment(id);
  if (!seg) return undefined;
  const from = original!.delimiters;
  const read = original!.escapeEncoding;
  const to = charsetLabel(charset) ?? 'utf-8';
  // Both UTF-8: hex data that is no UTF-8 was read as Latin-1 (hex-data-not-utf8, an engine
  // that relabelled a RIS's 8859/1 feed): written as the text it was read as, since a UTF-8
  // reader gets U+FFFD from `M\XDC\LLER`. Before, the PID went out with the lone byte DC.
  const recode = !sameBytes(read, to)
    ? (field: string) => recodeHexData(field, read)
    : to === 'utf-8'
      ? (field: string) => recodeHexData(field, read, DEFAULT_DELIMITERS, isValidUtf8)
      : (field: string) => field;
  const written = [
    seg.id,
    ...seg.fields.slice(1).map((f, i) => {
      const field = recode(transcodeRaw(f, from, DEFAULT_DELIMITERS));
      return formattingModeOf(id, i + 1) === 'text' ? flattenFormatting(field) : field;
    }),
  ].join('|');
  // fields the intake does not read, each valid for its type or empty (hl7-result.echo.ts)
  return withValidEchoes(written);
}

/** Two decoder labels that read every byte alike (ASCII is decoded and written as Latin-1). */
function sameBytes(a: string, b: string): boolean {
  const norm = (label: string) => (label === 'ascii' ? 'latin1' : label);
  return norm(a) === norm(b);
}

/** MSH in the site's version (the original order's MSH-12 unless configured), addressed back to its sender. */
export function msh(
  original: Hl7Message | undefined,
  settings: Hl7ResultSettings,
  type: 'ORU' | 'ORM',
  controlId: string,
  now: Date,
  /** MSH-18 (charsetFor, or UTF-8 when the text needs it). */
  charset: string = charsetFor(original),
): { spec: Hl7SegmentSpec; version: string } {
  const version = settings.forceVersion ?? original?.version ?? settings.defaultVersion;
  const event = type === 'ORU' ? 'R01' : 'O01';
  // MSH-9.3 message structure exists from v2.3.1 on.
  const messageType = versionAtLeast(version, '2.3.1')
    ? [type, event, `${type}_${event}`]
    : [type, event];
  const o = original?.msh;
  return {
    version,
    spec: {
      id: 'MSH',
      fields: numberedFields(
        {
          3: settings.sendingApplication,
          4: settings.sendingFacility,
          // Back to whoever sent the order: its MSH-3 / MSH-4 whole (v2.5.1 §2.15.9.5-6: HD,
          // namespace ^ universal ID ^ type, subcomponents kept), not just the namespace, so a
          // RIS routing on the OID (`RIS^1.2.3.4^ISO`) recognises the answer as addressed to it.
          // (HD has three components: more are no part of it)
          5: o?.structure(3).slice(0, 3),
          6: o?.structure(4).slice(0, 3),
          7: formatHl7Timestamp(now),
          9: messageType,
          10: controlId,
          // MSH-11 (PT, table 0103) of the order: results of a RIS's test order (`T`, accepted
          // when the sandbox is the upstream) go back as test data, never as production `P`.
          11: o?.value(11) ? processingOf(o.value(11, 1, 1)!, o.value(11, 1, 2)) : 'P',
          12: version,
          15: 'AL',
          16: 'NE',
          18: msh18For(charset, version),
        },
        3,
      ),
    },
  };
}

/** HL7 table 0207 (processing mode, PT.2): archive, initial load, restore, current processing. */
const TABLE_0207 = ['A', 'I', 'R', 'T'];

/**
 * MSH-11 of our message (PT): the order's processing ID (checked against table 0103 at
 * intake) and its processing mode when that is a table 0207 code. Before, the order's PT was
 * copied whole, `P^Z&q` included, a value a RIS validating the result refuses.
 */
function processingOf(id: string, mode: string | undefined): string | string[] {
  return mode !== undefined && TABLE_0207.includes(mode) ? [id, mode] : id;
}

const SEX_CODES = { male: 'M', female: 'F', other: 'O', unknown: 'U' } as const;

/**
 * The order's PID, but PID-8 (IS, table 0001) the sex the order holds now: an ADT^A08 that
 * corrected it (applied to the order's patient at intake) reaches the result; before, the ORU
 * carried the order's PID-8 as first received. The sender's own code stays when it reads as
 * that sex (`A`, ambiguous, is other: not rewritten `O`); a free-text PID-8 (`female`, `W`,
 * `männlich`: read at intake as a quirk), an IS value outside its table that a RIS validating
 * PID-8 refuses, is never copied: written as the code the order was read as, or left empty
 * when the text said nothing we could read. An explicit null `""` stays when the order has no
 * sex.
 */
function withCurrentSex(pid: string, input: PublicationInput): string {
  const fields = pid.split('|');
  const written = fields[8] ?? '';
  const code = written.split('^')[0] ?? '';
  const readAs = (TABLE_0001_SEX as Record<string, AdministrativeSex | undefined>)[code];
  // without an order model (a bare segment check), the sender's own code when it is one
  const current = input.order ? input.order.request.patient.sex : readAs;
  const wanted =
    current !== undefined
      ? readAs === current
        ? written
        : SEX_CODES[current]
      : code === '""'
        ? written
        : '';
  if (wanted === written) return pid;
  while (fields.length <= 8) fields.push('');
  fields[8] = wanted;
  return fields.join('|');
}

/**
 * The order's PID, but PID-7 (DT/DTM; a TS `19560214^D` before v2.5) the birth date the order
 * holds now: an ADT^A08 that corrected it (applied to the order's patient at intake) reaches
 * the result, where before the ORU carried the PID as first received and the RIS filed the
 * result under a birth date the hospital had corrected. The sender's own value stays when it
 * is that date (its time and TS precision kept); an explicit null `""` stays when the order
 * has no birth date. Anything else is never copied: `19700230`, `abc` or `1956-04-02` is
 * answered at intake with a warning ERR and stored as no birth date, and a DT/DTM field
 * holding it is refused by a RIS validating PID-7 (and the whole result with it).
 */
function withCurrentBirthDate(pid: string, input: PublicationInput): string {
  const fields = pid.split('|');
  const written = fields[7] ?? '';
  const value = written.split('^')[0] ?? '';
  // without an order model (a bare segment check), the sender's own value when it is a date
  const current = input.order ? input.order.request.patient.birthDate : hl7DateOf(value);
  const date = current === undefined ? undefined : isoToHl7Dtm(current);
  const wanted =
    date !== undefined
      ? hl7DateOf(value) === current
        ? written
        : date
      : value === '""'
        ? written
        : '';
  if (wanted === written) return pid;
  while (fields.length <= 7) fields.push('');
  fields[7] = wanted;
  return fields.join('|');
}

/** PID-3 (CX, repeating) of the patient identifiers an order holds. */
function patientIdentifiers(identifiers: readonly Identifier[]): Hl7FieldValue {
  return {
    repetitions: identifiers.map((i) => [
      i.value,
      undefined,
      undefined,
      // CX-4 is an HD: a FHIR system goes in as its universal ID (table 0301 type)
      hdOf(i.system),
      i.type ?? 'MR',
    ]),
  };
}

/**
 * The order's PID, but PID-3 the identifiers the order holds now when it no longer holds one
 * the order named: an ADT^A40 merged the order's patient into another (intake moved the order
 * to the surviving record). Before, the ORU named the record the merge retired, and the RIS
 * filed the result under a patient that no longer exists. Untouched while every identifier the
 * order sent is still the order's (its repetitions and assigning authorities as written).
 */
function withCurrentIdentifiers(pid: string, input: PublicationInput, sent: Hl7Segment): string {
  const identifiers = input.order?.request.patient.identifiers ?? [];
  if (identifiers.length === 0) return pid;
  const held = new Set(identifiers.map((i) => i.value));
  let retired = false;
  for (let r = 1; r <= sent.repetitionCount(3) && !retired; r += 1) {
    const value = sent.value(3, r, 1);
    retired = value !== undefined && value.trim() !== '' && !held.has(value);
  }
  if (!retired) return pid;
  const fields = pid.split('|');
  while (fields.length <= 3) fields.push('');
  fields[3] = encodeField(patientIdentifiers(identifiers));
  return fields.join('|');
}

/**
 * The length of each XPN component we write (v2.5.1 2A.3.88 and FN 2A.3.28; v2.7 gives the
 * same, marked `#`, "may be truncated"): FN.1 surname 50, given name 30, second and further
 * given names 30, suffix 20, prefix 20. Our record keeps a name whole up to 1,000 characters a
 * part (domain/text-bounds.ts); a longer part than its component holds is written as its first
 * characters (counted as written, escapes included, never splitting a character), and the cut
 * is recorded. Before, a 300-character family name from a FHIR order or an ADT^A08 went into
 * the ORU's PID-5 whole, past what a RIS validating XPN takes.
 */
const XPN_COMPONENTS = [
  { at: 'PID-5.1', what: 'family name', max: 50, type: 'FN.1 surname, ST 50' },
  { at: 'PID-5.2', what: 'given name', max: 30, type: 'XPN.2, ST 30' },
  { at: 'PID-5.3', what: 'further given names', max: 30, type: 'XPN.3, ST 30' },
  { at: 'PID-5.4', what: 'suffix', max: 20, type: 'XPN.4, ST 20' },
  { at: 'PID-5.5', what: 'prefix', max: 20, type: 'XPN.5, ST 20' },
] as const;

/** The parts of a name in XPN order: family, given, further given names, suffix, prefix. */
function xpnParts(name: PersonName): (string | undefined)[] {
  return [
    name.family,
    name.given?.[0],
    name.given?.slice(1).join(' ') || undefined,
    name.suffix,
    name.prefix,
  ];
}

/** A line break, tab or other control character (C0, DEL, and the Unicode line breaks). */
// eslint-disable-next-line no-control-regex -- control characters are what this is about
const NOT_ONE_LINE = /[\u0000-\u001f\u007f\u0085\u2028\u2029]/;
// eslint-disable-next-line no-control-regex
const CONTROLS = /[\u0000-\u001f\u007f]+/g;

/**
 * A value we write from the order into an ST component (an XPN part, CE.2): printable text on
 * one line (v2.5.1 2A.2.74), as ORC-16 and OBX-3.2 are written. A FHIR order's strings may hold
 * line breaks and tabs (R4 `string`), which went out as hexadecimal data: PID-5
 * `Smith\X0A\Jones^Ann\X09\Marie`, OBR-4.2 `CT\X0A\Chest`, a line break inside the family
 * name for a RIS that decodes it. Lines trimmed and joined by a space, a tab one space; a
 * value without any is written as it is (an OBR-4.2 of spaces goes back as the RIS sent it).
 */
export function stText(text: string): string {
  return NOT_ONE_LINE.test(text) ? oneLine(text).replace(CONTROLS, ' ') : text;
}

/** XPN component `i` of `part`, cut to its length (XPN_COMPONENTS) and the cut recorded. */
function xpnPart(part: string, i: number, cuts: string[]): string {
  const c = XPN_COMPONENTS[i]!;
  if (hl7EncodedLength(part) <= c.max) return part;
  cuts.push(
    `${c.at} (${c.what}): ${[...part].length} characters, written as its first ${c.max} (${c.type}); the order keeps the whole name`,
  );
  return boundedText(part, c.max, hl7EncodedLength, '');
}

/** PID-5 (XPN): family ^ given ^ further given names ^ suffix ^ prefix (v2.5.1 2A.3.88). */
function patientName(name: PersonName, cuts: string[]): Hl7FieldValue {
  return xpnParts(name).map((part, i) => {
    const line = part === undefined ? '' : stText(part);
    return line === '' ? undefined : xpnPart(line, i, cuts);
  });
}

/**
 * The sender's PID-5, unchanged, but each part of its first repetition (the name the order
 * holds) within its XPN component: a part written longer is replaced by its first characters
 * (FN.1 only, the surname, in component 1), its other subcomponents, components and
 * repetitions kept as written. Before, an order's own 300-character family name (taken whole
 * at intake) was echoed whole, FN.1 of 300, while a renamed one was held to 50.
 */
function withinXpn(pid: string, name: PersonName, cuts: string[]): string {
  const fields = pid.split('|');
  const repetitions = (fields[5] ?? '').split('~');
  const components = repetitions[0]!.split('^');
  const parts = xpnParts(name);
  let changed = false;
  XPN_COMPONENTS.forEach((c, i) => {
    const leaves = (components[i] ?? '').split('&');
    const part = parts[i];
    // as written (escapes included), the surname the first subcomponent of FN
    const written = i === 0 ? leaves[0]! : (components[i] ?? '');
    if (part === undefined || written.length <= c.max) return;
    const cut = escapeValue(xpnPart(stText(part), i, cuts), DEFAULT_DELIMITERS);
    components[i] = i === 0 ? [cut, ...leaves.slice(1)].join('&') : cut;
    changed = true;
  });
  if (!changed) return pid;
  repetitions[0] = components.join('^');
  fields[5] = repetitions.join('~');
  return fields.join('|');
}

/**
 * The order's PID, but PID-5 the name the order holds now when that is not the name its
 * PID-5 reads as (first repetition, as intake reads it, control characters as stored): an
 * ADT^A08 renamed the patient (a marriage, a corrected spelling). Before, the ORU carried the
 * name the hospital had replaced. An unchanged name keeps the sender's PID-5 (every
 * repetition, name type codes), each part within its XPN component (withinXpn).
 */
function withCurrentName(
  pid: string,
  input: PublicationInput,
  sent: Hl7Segment,
  cuts: string[],
): string {
  const name = input.order?.request.patient.name;
  if (!name) return pid;
  const given = [sent.value(5, 1, 2), sent.value(5, 1, 3)].filter((g) => g !== undefined);
  const read = pgSafeDeep({
    family: sent.value(5, 1, 1, 1),
    given: given.length > 0 ? given : undefined,
    suffix: sent.value(5, 1, 4),
    prefix: sent.value(5, 1, 5),
  });
  const same = (a: string | undefined, b: string | undefined) => (a ?? '') === (b ?? '');
  if (
    same(read.family, name.family) &&
    same(read.given?.join('\u0000'), name.given?.join('\u0000')) &&
    same(read.suffix, name.suffix) &&
    same(read.prefix, name.prefix)
  )
    return withinXpn(pid, name, cuts);
  const fields = pid.split('|');
  while (fields.length <= 5) fields.push('');
  fields[5] = encodeField(patientName(name, cuts));
  return fields.join('|');
}

/**
 * The result's PID. `cuts` receives a line per value written shorter than the order holds it
 * (a name part past its XPN component), for the delivery's audit record.
 */
export function pidOf(
  input: PublicationInput,
  original: Hl7Message | undefined,
  charset: string = charsetFor(original),
  cuts: string[] = [],
): string {
  const raw = originalSegment(original, 'PID', charset);
  if (raw) {
    const sent = original!.segment('PID')!;
    const current = withCurrentName(withCurrentIdentifiers(raw, input, sent), input, sent, cuts);
    return withCurrentBirthDate(withCurrentSex(current, input), input);
  }
  const p = input.order.request.patient;
  const sex = SEX_CODES;
  return encodeSegment({
    id: 'PID',
    fields: [
      '1',
      undefined,
      patientIdentifiers(p.identifiers),
      undefined,
      // XPN: the suffix was dropped once, and the RIS got one name for John Smith Jr. and
      // his father
      p.name ? patientName(p.name, cuts) : undefined,
      undefined,
      p.birthDate === undefined ? undefined : isoToHl7Dtm(p.birthDate),
      p.sex ? sex[p.sex] : undefined,
    ],
  });
}

export function pv1Of(
  original: Hl7Message | undefined,
  charset: string = charsetFor(original),
): string {
  // PV1-2 patient class is required; U = unknown (table 0004) when the order had no visit.
  return (
    originalSegment(original, 'PV1', charset) ?? encodeSegment({ id: 'PV1', fields: ['1', 'U'] })
  );
}

/**
 * The order's EI exactly as its HL7 order wrote it (ORC-n, else OBR-n, whose first component is
 * the number): entity ID ^ namespace ID ^ universal ID ^ universal ID type (v2.5.1 2A.3.24).
 * The order model keeps one "system" per number (the namespace, else the OID), so a number
 * sent as `556071^EPC^1.2.840.114350^ISO` came back `556071^EPC`, and one sent with an OID
 * only, `PLC-1^^1.2.3^ISO`, came back `PLC-1^1.2.3` (the OID in the namespace component):
 * neither is the number the RIS sent, and a RIS matching on the whole EI finds no order.
 */
function sentEi(
  original: Hl7Message | undefined,
  field: 2 | 3,
  value: string,
): Hl7Component[] | undefined {
  for (const id of ['ORC', 'OBR']) {
    for (const seg of original?.segmentsById(id) ?? []) {
      if (seg.value(field) === value) return boundedEi(seg.structure(field).slice(0, 4), value);
    }
  }
  return undefined;
}

/**
 * ORC-2/OBR-2: the placer's number as the order brought it; for a FHIR order without one, the
 * ServiceRequest's id (namespace `FHIR`), so the receiver can match the result to its request.
 */
export function placerNumberOf(
  input: PublicationInput,
  original?: Hl7Message,
): Hl7Component[] | undefined {
  const o = input.order;
  const placer = o.request.placerOrderNumber;
  if (o.placerOrderNumber)
    return (
      sentEi(original, 2, o.placerOrderNumber) ??
      boundedEi([o.placerOrderNumber, ...hdOf(placer?.system)], o.placerOrderNumber)
    );
  const srId = input.serviceRequest?.match(/ServiceRequest\/([^/]+)/)?.[1];
  return srId ? [srId, 'FHIR'] : undefined;
}

/**
 * ORC-3/OBR-3 (the same value in both, v2.5.1 §4.5.1.3/§4.5.3.3): the filler number the order
 * came with, else ours — the adapter's order id, namespace `IMAGING-AI-ADAPTER` — so that a
 * later correction can name the order (intake finds an order by its id as a filler number).
 */
export function fillerNumberOf(input: PublicationInput, original?: Hl7Message): Hl7Component[] {
  const o = input.order;
  const filler = o.request.fillerOrderNumber;
  if (o.fillerOrderNumber)
    return (
      sentEi(original, 3, o.fillerOrderNumber) ??
      boundedEi([o.fillerOrderNumber, ...hdOf(filler?.system)], o.fillerOrderNumber)
    );
  return [input.orderId, 'IMAGING-AI-ADAPTER'];
}

export function orc(
  input: PublicationInput,
  control: string,
  status: string,
  now: Date,
  original?: Hl7Message,
): Hl7SegmentSpec {
  const o = input.order;
  const noResult = input.row.hl7.orderStatus === 'CA';
  // one line: CE.2 is an ST (printable characters), and a reason over lines had its line
  // breaks written as hexadecimal data (`\X0A\`)
  const reason = noResult ? oneLine(noResultPhrase(input.row.task.reason, input.reason)) : '';
  return {
    id: 'ORC',
    fields: numberedFields({
      1: control,
      2: placerNumberOf(input, original),
      3: fillerNumberOf(input, original),
      4: o.request.placerGroupNumber?.value,
      5: status,
      9: formatHl7Timestamp(now),
      // ORC-16 order control code reason (CE): text only, at most 199 characters (CE.2, ST) as
      // written, escapes included, cut between characters and saying so: cut at 199 UTF-16
      // units, an emoji there lost its second half (U+FFFD to the RIS, and a lone surrogate our
      // own record could not store); counted before escaping, 199 `|` went out as 597.
      16: reason ? [undefined, boundedText(reason, 199, hl7EncodedLength)] : undefined,
    }),
  };
}

function resultStatusOf(input: PublicationInput): string {
  const s = input.row.hl7.resultStatus;
  // Table 0123 C = correction of a final result.
  return s === 'F' && input.correction ? 'C' : s;
}

/**
 * OBR-4.2, the procedure's text (CE.2 in v2.5.1, CWE.2 in v2.7: ST 199). The order keeps its
 * procedure text whole up to 1,000 characters (domain/text-bounds.ts); a longer one than CE.2
 * holds is written as its first characters, and the cut recorded. The code (CE.1) is never
 * cut: shortened, it would name another procedure.
 */
const PROCEDURE_TEXT_MAX = 199;

function procedureText(text: string | undefined, cuts: string[]): string | undefined {
  const display = text === undefined ? undefined : stText(text);
  if (display === undefined || hl7EncodedLength(display) <= PROCEDURE_TEXT_MAX) return display;
  cuts.push(
    `OBR-4.2 (procedure text): ${[...display].length} characters, written as its first ${PROCEDURE_TEXT_MAX} (CE.2/CWE.2, ST 199); the order keeps the whole text`,
  );
  return boundedText(display, PROCEDURE_TEXT_MAX, hl7EncodedLength, '');
}

export function obr(
  input: PublicationInput,
  now: Date,
  original?: Hl7Message,
  cuts: string[] = [],
): Hl7SegmentSpec {
  const o = input.order;
  const p = o.request.procedure;
  const d = input.device;
  const statusAt = new Date(input.statusAt);
  return {
    id: 'OBR',
    fields: numberedFields({
      1: '1',
      2: placerNumberOf(input, original),
      3: fillerNumberOf(input, original),
      4: p?.code
        ? [p.code, procedureText(p.display, cuts), hl7CodingSystem(p.system)]
        : ['AI', `AI analysis ${o.request.products.join(',')}`, LOCAL],
      // OBR-7 observation date/time: the order's own date at its own precision (FHIR `2026-11`
      // is `202611`, not an invented midnight; a leap second is no Invalid Date). Required in a
      // result message (v2.5.1 4.5.3.7): an order without a time has the time it reached us,
      // as DiagnosticReport.effectiveDateTime has.
      7:
        (o.request.requestedAt ? isoToHl7Dtm(o.request.requestedAt) : undefined) ??
        isoToHl7Dtm(o.createdAt),
      // OBR-18 placer field 1: the accession number (IHE SWF practice).
      18: o.accessionNumber ?? undefined,
      // OBR-22 results report / status change date-time.
      22: formatHl7Timestamp(Number.isNaN(statusAt.getTime()) ? now : statusAt),
      25: resultStatusOf(input),
      // OBR-32 principal result interpreter (NDL; CNN in component 1): the AI device, by its
      // UDI, or its UID when the site's UDI has nothing printable (as the SR's Device Observer
      // is); ID number and name are ST, one line. Before, a UDI of spaces or a control
      // character went in as written (`\X07\`), a tab in the name as `\X09\`.
      32: [[stText(d.udi ?? '').trim() || d.uid, stText(`${d.name} ${d.version}`)]],
    }),
  };
}

/** A value's length as our HL7 messages write it: escaped with our delimiters. */
export function hl7EncodedLength(value: string): number {
  return escapeValue(value, DEFAULT_DELIMITERS).length;
}
