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
  /** Every message of the file, in order. */
  messages: Buffer[];
  /** Count the sender declared in BTS-1, when it did (the first batch's, as `batchHeader`). */
  declaredCount?: number;
  /**
   * The batches of the file in order, each its header, the number of `messages` that belong
   * to it (consecutive, from the first) and its own BTS-1: a file holds one or more batches
   * (v2.5.1 §2.10.3), each answered by its own batch in the acknowledgment.
   */
  batches: Hl7BatchPart[];
}

export interface Hl7BatchPart {
  header?: string[];
  messageCount: number;
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
  const batch: Hl7Batch = { messages: [], batches: [] };
  let current: string[] | undefined;
  // the batch being read: opened by a BHS, or by a message outside any (a file without BHS),
  // closed by its BTS
  let part: Hl7BatchPart | undefined;
  const flush = () => {
    if (current && current.length > 0) {
      batch.messages.push(Buffer.from(`${current.join('\r')}\r`, 'latin1'));
      if (!part) batch.batches.push((part = { messageCount: 0 }));
      part.messageCount += 1;
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
      else {
        batch.batchHeader ??= fields;
        batch.batches.push((part = { header: fields, messageCount: 0 }));
      }
    } else if (id === 'BTS' || id === 'FTS') {
      flush();
      if (id === 'BTS') {
        // BTS-1 (NM) is optional: an empty one declares no count (Number('') is 0)
        const written = (line.split(line[3] ?? '|')[1] ?? '').trim();
        const count = Number(written);
        if (!part) batch.batches.push((part = { messageCount: 0 }));
        if (written !== '' && Number.isInteger(count)) {
          part.declaredCount = count;
          if (batch.batches.length === 1) batch.declaredCount = count;
        }
        part = undefined;
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
  /** One per message of `batch.messages`, in order (empty: that message wants none). */
  acks: Buffer[];
  ourApplication: string;
  ourFacility: string;
  /** One control ID per batch of the answer (and the file's), in order. */
  controlId: () => string;
  now: Date;
  /** A refusal of the whole batch (ACK bodies empty): said in BHS-10 (batch comment). */
  comment?: string;
}): Buffer {
  const { batch, now } = options;
  const header = (id: 'FHS' | 'BHS', theirs: string[] | undefined, controlId: string) =>
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
        controlId,
        echoed(theirs, 11, CONTROL_ID_MAX_CHARS),
      ],
    }).slice(3);
  const parts: Buffer[] = [];
  if (batch.fileHeader)
    parts.push(Buffer.from(`${header('FHS', batch.fileHeader, options.controlId())}\r`, 'latin1'));
  // Each batch of the file answered by its own (v2.5.1 §2.10.3): its BHS-12 naming that
  // batch's BHS-11, its acknowledgments, its BTS-1 their count and BTS-2 its own shortfall.
  // Before, one batch answered them all: a second batch's BHS-11 was never named, FTS-1 said
  // 1, and BTS-1 counts were summed over the file, so a batch cut short went unnoticed when
  // another declared fewer than it held. A batch left with no acknowledgment (its messages all
  // NE|NE) is left out, unless its count is short: then it says so.
  let first = 0;
  let written = 0;
  for (const part of batchesOf(batch)) {
    const acks = options.acks.slice(first, first + part.messageCount).filter((a) => a.length > 0);
    first += part.messageCount;
    const shortfall = batchCountNote(part);
    if (acks.length === 0 && !shortfall) continue;
    written += 1;
    parts.push(Buffer.from(`${header('BHS', part.header, options.controlId())}\r`, 'latin1'));
    for (const ack of acks) {
      parts.push(ack);
      if (ack[ack.length - 1] !== 0x0d) parts.push(Buffer.from('\r'));
    }
    const note = shortfall ? `|${clean(shortfall)}` : '';
    parts.push(Buffer.from(`BTS|${acks.length}${note}\r`, 'latin1'));
  }
  if (batch.fileHeader) parts.push(Buffer.from(`FTS|${written}\r`, 'latin1'));
  return Buffer.concat(parts);
}

/** The batches of a file; one holding every message when the split named none (a refusal). */
function batchesOf(batch: Hl7Batch): Hl7BatchPart[] {
  return batch.batches.length > 0
    ? batch.batches
    : [
        {
          header: batch.batchHeader,
          messageCount: batch.messages.length,
          declaredCount: batch.declaredCount,
        },
      ];
}

/**
 * What a batch's BTS-1 says against the messages it holds, when they differ (a file cut short,
 * a frame an engine truncated): said in its BTS-2 and with each of its messages.
 */
export function batchCountNote(part: Hl7BatchPart): string | undefined {
  return part.declaredCount !== undefined && part.declaredCount !== part.messageCount
    ? `BTS-1 declares ${part.declaredCount} message(s); the batch holds ${part.messageCount}`
    : undefined;
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
