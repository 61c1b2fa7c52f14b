import { Hl7Error } from './hl7.error';

/**
 * Minimal Lower Layer Protocol framing (HL7 v2.5.1 Implementation Guide, Appendix C
 * "Lower Layer Protocols", C.4 MLLP): every message is sent as
 * <VT = 0x0B> payload <FS = 0x1C><CR = 0x0D>.
 */
export const MLLP_START_BLOCK = 0x0b;
export const MLLP_END_BLOCK = 0x1c;
export const MLLP_CARRIAGE_RETURN = 0x0d;
/** LF: the CR of the trailer as a sender that writes every line end as LF sends it. */
const LINE_FEED = 0x0a;

export const DEFAULT_MAX_MLLP_MESSAGE_BYTES = 10 * 1024 * 1024;

/**
 * How long an FS that ends the data received so far waits for its CR before the frame is
 * taken without it (MllpDecoder.flushMissingCr). The two bytes of the trailer come in one
 * packet from a conforming peer; this only delays a message or an ACK from a peer that leaves
 * the CR out (our listener and our client alike).
 */
export const MISSING_CR_WAIT_MS = 200;

export function encodeMllpFrame(payload: Buffer): Buffer {
  return Buffer.concat([
    Buffer.from([MLLP_START_BLOCK]),
    payload,
    Buffer.from([MLLP_END_BLOCK, MLLP_CARRIAGE_RETURN]),
  ]);
}

export interface MllpDecoderOptions {
  /** Largest payload accepted, in bytes (framing bytes excluded). Default 10 MiB. */
  maxMessageBytes?: number;
}

/** What one push() produced: complete payloads in arrival order, and any stray bytes dropped. */
export interface MllpDecodeResult {
  messages: Buffer[];
  /** Bytes received outside a frame (before a VT) and dropped in this push. */
  discardedBytes: number;
  /**
   * Messages of `messages` whose frame ended without the CR: an FS followed by the VT of the
   * next frame, or by an LF instead of the CR. Tolerated; the caller records the deviation
   * with the message.
   */
  missingCr: Buffer[];
  /**
   * Frames abandoned in this push because they exceeded the size limit
   * (Hl7Error code MLLP_MESSAGE_TOO_LARGE), in arrival order.
   */
  errors: Hl7Error[];
}

/**
 * Incremental MLLP decoder. Feed it socket chunks in order; it returns each complete payload
 * once its FS CR trailer has arrived. It keeps only the bytes of the frame still being
 * received, so a long-lived connection never accumulates delivered messages, and it copes
 * with a frame split over many chunks as well as many frames in one chunk.
 *
 * Tolerated deviations from C.4: bytes outside a frame (e.g. a stray CR/LF between frames, or
 * garbage before the VT) are counted and dropped; a VT inside an unfinished frame restarts the
 * frame (the earlier partial frame can never complete and is counted as discarded); an FS
 * followed by a VT ends its frame without the CR (senders that omit the CR; listed in
 * `missingCr`), and so does an FS followed by an LF (a sender that writes every line end,
 * the trailer's CR included, as LF; the LF is taken as that trailer's, also in the next
 * chunk): an FS is no character of HL7 text, and before, such a frame never ended and its
 * message was neither answered nor stored; an FS followed by anything else is kept as
 * payload, since the trailer is the two-byte sequence. An FS that ends the data received so far may still get its CR: the
 * caller waits a moment and then takes the frame with flushMissingCr().
 */
export class MllpDecoder {
  private readonly maxMessageBytes: number;
  /** Chunks of the current frame's payload (after the VT), not yet terminated. */
  private parts: Buffer[] = [];
  private partsLength = 0;
  private inFrame = false;
  /** True when the previous chunk ended with FS inside a frame: the CR may start the next chunk. */
  private pendingFs = false;
  /** A frame was taken without its CR: a CR that starts the next chunk is that trailer's. */
  private lateCr = false;
  private totalDiscarded = 0;
  private errors: Hl7Error[] = [];

  /** True while a frame has started (VT seen) and has not ended yet. */
  get hasPartialFrame(): boolean {
    return this.inFrame;
  }

  constructor(options: MllpDecoderOptions = {}) {
    this.maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MLLP_MESSAGE_BYTES;
  }

  /** True when the data so far ends with an FS inside a frame: the CR may still come. */
  get awaitingCr(): boolean {
    return this.pendingFs;
  }

  /**
   * Takes the frame whose FS ended the data received so far, when its CR has not come (a
   * sender that omits it waits for our answer and sends nothing more). A CR arriving after all
   * is then taken as that trailer's, not as a stray byte.
   */
  flushMissingCr(): Buffer | undefined {
    if (!this.pendingFs) return undefined;
    this.lateCr = true;
    return this.takeFrame();
  }

  /** Bytes dropped outside frames since this decoder was created. */
  get discardedBytes(): number {
    return this.totalDiscarded;
  }

  /** Bytes currently buffered for an unfinished frame. */
  get bufferedBytes(): number {
    return this.partsLength + (this.pendingFs ? 1 : 0);
  }

  /**
   * Consume one chunk. A frame that grows beyond the limit is reported once in `errors`
   * (MLLP_MESSAGE_TOO_LARGE) and dropped; its remaining bytes count as discarded and the decoder
   * resynchronises at the next VT, so frames after it in the same chunk are still delivered.
   */
  push(chunk: Buffer): MllpDecodeResult {
    const messages: Buffer[] = [];
    const missingCr: Buffer[] = [];
    const errors: Hl7Error[] = [];
    this.errors = errors;
    let discarded = 0;
    let i = 0;
    if (this.lateCr && chunk.length > 0) {
      this.lateCr = false;
      if (chunk[0] === MLLP_CARRIAGE_RETURN || chunk[0] === LINE_FEED) i = 1;
    }
    if (this.pendingFs && chunk.length > 0) {
      this.pendingFs = false;
      if (chunk[0] === MLLP_CARRIAGE_RETURN) {
        messages.push(this.takeFrame());
        i = 1;
      } else if (chunk[0] === MLLP_START_BLOCK || chunk[0] === LINE_FEED) {
        const frame = this.takeFrame();
        messages.push(frame);
        missingCr.push(frame);
        if (chunk[0] === LINE_FEED) i = 1;
      } else {
        this.append(Buffer.from([MLLP_END_BLOCK]));
      }
    }
    // The next VT and FS at or after a position, each found once per position it passes (a
    // read of FS bytes without CR, or of VT bytes, is scanned once, not once per byte).
    let vt = -2;
    let fs = -2;
    const next = (byte: number, at: number, known: number): number =>
      known === -2 || (known !== -1 && known < at) ? chunk.indexOf(byte, at) : known;
    // Start of the payload bytes of this read not yet added to the frame: an FS without CR
    // stays in the payload, and the run it belongs to is added once, at its end.
    let from = i;
    while (i < chunk.length) {
      if (!this.inFrame) {
        const start = chunk.indexOf(MLLP_START_BLOCK, i);
        if (start === -1) {
          discarded += chunk.length - i;
          break;
        }
        discarded += start - i;
        this.inFrame = true;
        i = start + 1;
        from = i;
        continue;
      }
      const end = (fs = next(MLLP_END_BLOCK, i, fs));
      const restart = (vt = next(MLLP_START_BLOCK, i, vt));
      if (restart !== -1 && (end === -1 || restart < end)) {
        // A new VT before the trailer: the sender abandoned the previous frame.
        discarded += this.partsLength + (restart - from);
        this.resetFrame();
        this.inFrame = true;
        i = restart + 1;
        from = i;
        continue;
      }
      if (end === -1) {
        this.append(chunk.subarray(from));
        break;
      }
      if (end === chunk.length - 1) {
        if (this.append(chunk.subarray(from, end))) this.pendingFs = true;
        else discarded += 1;
        break;
      }
      if (chunk[end + 1] === MLLP_CARRIAGE_RETURN) {
        if (this.append(chunk.subarray(from, end))) messages.push(this.takeFrame());
        else discarded += 2;
        i = end + 2;
      } else if (chunk[end + 1] === MLLP_START_BLOCK || chunk[end + 1] === LINE_FEED) {
        // FS then the next frame's VT: the sender leaves out the CR; FS LF: writes it as LF.
        const lf = chunk[end + 1] === LINE_FEED ? 1 : 0;
        if (this.append(chunk.subarray(from, end))) {
          const frame = this.takeFrame();
          messages.push(frame);
          missingCr.push(frame);
        } else discarded += 1 + lf;
        i = end + 1 + lf;
      } else {
        // FS without CR: part of the payload, keep scanning after it.
        i = end + 1;
      }
    }
    this.totalDiscarded += discarded;
    this.errors = [];
    return { messages, missingCr, discardedBytes: discarded, errors };
  }

  /** Adds payload bytes to the current frame; false when the frame was dropped as oversize. */
  private append(part: Buffer): boolean {
    if (part.length === 0) return true;
    if (this.partsLength + part.length > this.maxMessageBytes) {
      const size = this.partsLength + part.length;
      this.totalDiscarded += size;
      this.resetFrame();
      this.errors.push(
        new Hl7Error(
          'MLLP_MESSAGE_TOO_LARGE',
          `MLLP frame exceeds ${this.maxMessageBytes} bytes (at least ${size} received)`,
        ),
      );
      return false;
    }
    // Sockets hand each read its own buffer, so a large part is kept as it is (no copy: a
    // 10 MB message would otherwise be held twice); a small one is copied so that it does not
    // pin a whole read buffer while the frame waits for the rest.
    this.parts.push(part.length >= 16 * 1024 ? part : Buffer.from(part));
    this.partsLength += part.length;
    return true;
  }

  private takeFrame(): Buffer {
    const frame = this.parts.length === 1 ? this.parts[0] : Buffer.concat(this.parts);
    this.resetFrame();
    return frame;
  }

  private resetFrame(): void {
    this.parts = [];
    this.partsLength = 0;
    this.inFrame = false;
    this.pendingFs = false;
  }
}
