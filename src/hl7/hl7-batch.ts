import { encodeSegment, formatHl7Timestamp } from './hl7-builder';
import { DEFAULT_DELIMITERS, Hl7Delimiters, transcodeRaw } from './hl7-escape';
import { CONTROL_ID_MAX_CHARS, HD_MAX_CHARS } from './hl7-echo-lengths';
import { QuirkCollector } from './hl7-quirk';
import { readDelimiters } from './hl7-separators';

/**
 * HL7 v2 batches (v2.5.1 §2.10.3): an optional file envelope (FHS … FTS) around batches
 * (BHS … BTS), each holding messages (MSH …). Pure: splits the bytes into the messages inside
 * (byte for byte, so each keeps its own charset) and builds the batch acknowledgment.
 */
export interface Hl7Batch {
  /** FHS-1..n / BHS-1..n fields as received (index = field number), when present. */
  fileHeader?: string[];
  batchHeader?: string[];
  messages: Buffer[];
  /** Count the sender declared in BTS-1, when it did. */
  declaredCount?: number;
}

/** True when the bytes start (after a BOM or white space) with FHS or BHS. */
export function isHl7Batch(bytes: Buffer): boolean {
  const head = bytes
    .subarray(0, 16)
    .toString('latin1')
    .replace(/^\u00ef\u00bb\u00bf/, '');
  return /^\s*(FHS|BHS)./.test(head);
}

/**
 * Splits a batch into its messages. Linear in the input; at most `maxMessages` messages (more
 * is refused by the caller). Segments outside a message other than the envelope's are ignored.
 */
export function splitHl7Batch(bytes: Buffer, maxMessages: number): Hl7Batch | { tooMany: true } {
  const text = bytes.toString('latin1');
  const lines = text.split(/\r\n|\r|\n/);
  const batch: Hl7Batch = { messages: [] };
  let current: string[] | undefined;
  const flush = () => {
    if (current && current.length > 0) {
      batch.messages.push(Buffer.from(`${current.join('\r')}\r`, 'latin1'));
    }
    current = undefined;
  };
  for (const raw of lines) {
    const line = raw.replace(/^\u00ef\u00bb\u00bf/, '');
    const id = line.slice(0, 3);
    if (id === 'FHS' || id === 'BHS') {
      flush();
      const fields = headerFields(line);
      if (id === 'FHS') batch.fileHeader = fields;
      else batch.batchHeader ??= fields;
    } else if (id === 'BTS' || id === 'FTS') {
      flush();
      if (id === 'BTS') {
        // BTS-1 (NM) is optional: an empty one declares no count (Number('') is 0)
        const written = (line.split(line[3] ?? '|')[1] ?? '').trim();
        const count = Number(written);
        if (written !== '' && Number.isInteger(count)) {
          batch.declaredCount = (batch.declaredCount ?? 0) + count;
        }
      }
    } else if (id === 'MSH') {
      flush();
      if (batch.messages.length >= maxMessages) return { tooMany: true };
      current = [line];
    } else if (current && line.trim() !== '') {
      current.push(line);
    }
  }
  flush();
  return batch;
}

/** Fields of an FHS/BHS line numbered as the standard numbers them (1 = separator, 2 = MSH-2-like). */
function headerFields(line: string): string[] {
  const sep = line[3] ?? '|';
  const parts = line.slice(4).split(sep);
  return ['', sep, ...parts];
}

/**
 * The batch acknowledgment (v2.5.1 §2.10.3): the envelope mirrored (our application as
 * sender, BHS-12/FHS-12 naming the sender's batch/file control ID), one acknowledgment per
 * message in order, BTS-1 the count of acknowledgments, FTS-1 the batch count.
 */
export function buildBatchAck(options: {
  batch: Hl7Batch;
  acks: Buffer[];
  ourApplication: string;
  ourFacility: string;
  controlId: string;
  now: Date;
  /** A refusal of the whole batch (ACK bodies empty): said in BHS-10 (batch comment). */
  comment?: string;
  /** BTS-1 of the batch did not match its messages: said in BTS-2 (batch comment). */
  countNote?: string;
}): Buffer {
  const { batch, now } = options;
  const header = (id: 'FHS' | 'BHS', theirs: string[] | undefined) =>
    id +
    encodeSegment({
      id: 'MSH',
      fields: [
        options.ourApplication,
        options.ourFacility,
        // FHS-5/BHS-5, -6: the sender's application and facility, each HD whole (as MSH-5/6
        // of an ACK): `RIS^1.2.3^ISO` named only `RIS` before
        echoed(theirs, 3, HD_MAX_CHARS, 3),
        echoed(theirs, 4, HD_MAX_CHARS, 3),
        formatHl7Timestamp(now),
        undefined,
        undefined,
        options.comment,
        options.controlId,
        echoed(theirs, 11, CONTROL_ID_MAX_CHARS),
      ],
    }).slice(3);
  const parts: Buffer[] = [];
  if (batch.fileHeader) parts.push(Buffer.from(`${header('FHS', batch.fileHeader)}\r`, 'latin1'));
  parts.push(Buffer.from(`${header('BHS', batch.batchHeader)}\r`, 'latin1'));
  for (const ack of options.acks) {
    if (ack.length === 0) continue;
    parts.push(ack);
    if (ack[ack.length - 1] !== 0x0d) parts.push(Buffer.from('\r'));
  }
  const count = options.acks.filter((a) => a.length > 0).length;
  const note = options.countNote ? `|${clean(options.countNote)}` : '';
  parts.push(Buffer.from(`BTS|${count}${note}\r`, 'latin1'));
  if (batch.fileHeader) parts.push(Buffer.from('FTS|1\r', 'latin1'));
  return Buffer.concat(parts);
}

/**
 * A field of the sender's FHS/BHS in our answer exactly, so the sender can match the answer to
 * what it sent (FHS-12/BHS-12, reference file/batch control ID, v2.5.1 §2.15.2.12, §2.15.1.12,
 * are its FHS-11/BHS-11; FHS-5/BHS-5 and -6 its HDs in fields 3 and 4): every component and
 * subcomponent as written and its escapes, rewritten from the delimiters its header declares to
 * ours (`transcodeRaw`: the same meaning, control characters as \Xhh\). A non-repeating field
 * holds one repetition: the first. Before, only the first component came back (`clean`), so
 * `F-20240318^RIS` was answered `F-20240318`, and `A\T\B` as `A`.
 */
function echoed(
  theirs: string[] | undefined,
  field: number,
  /**
   * The most its type holds (HD 227, a control ID's ST 199): a longer value is not written
   * back (cut, it would name another batch or application). Before, a 5,000-character BHS-11
   * came back whole in BHS-12.
   */
  max: number,
  /** Components its type has (an HD three): more the sender wrote are no part of it. */
  components?: number,
): { encoded: string } | undefined {
  const raw = theirs?.[field];
  if (!raw || [...raw].length > max) return undefined;
  const from = headerDelimiters(theirs);
  const first = raw.split(from.repetition)[0]!;
  const kept =
    components === undefined
      ? first
      : first.split(from.component).slice(0, components).join(from.component);
  const text = transcodeRaw(kept, from, DEFAULT_DELIMITERS).replace(/\^+$/, '');
  return text === '' ? undefined : { encoded: text };
}

/** The delimiters an FHS/BHS declares in fields 1 and 2 (as MSH-1/2); the standard ones if unreadable. */
function headerDelimiters(theirs: string[]): Hl7Delimiters {
  try {
    return readDelimiters(`MSH${theirs[1] ?? '|'}${theirs[2] ?? ''}`, new QuirkCollector());
  } catch {
    return DEFAULT_DELIMITERS;
  }
}

/** A value copied from the sender's header: its first component, printable ASCII, bounded. */
function clean(value: string | undefined): string | undefined {
  if (!value) return undefined;
  const v = value
    .split(/[\^~&\\]/)[0]!
    .replace(/[^\x20-\x7e]/g, '')
    .slice(0, CONTROL_ID_MAX_CHARS);
  return v || undefined;
}
