import { asBuffer } from '../common/bounded-body';
import { StudyError } from './study.error';

/**
 * A streaming reader of MIME multipart bodies (RFC 2046 §5.1, used by DICOMweb as
 * multipart/related, RFC 2387, for WADO-RS responses and STOW-RS requests). It never holds
 * more than one incoming chunk plus a delimiter's length: part bodies are handed out as
 * they arrive, so a study of any size streams straight to disk.
 */

export type MultipartEvent =
  | { type: 'part'; headers: Record<string, string> }
  | { type: 'data'; chunk: Buffer }
  | { type: 'end-part' };

const CRLF = Buffer.from('\r\n');
const HEADER_END = Buffer.from('\r\n\r\n');
const MAX_HEADER_BYTES = 16 * 1024;

/** The boundary parameter of a multipart Content-Type (quoted or token form, RFC 2045 §5.1). */
export function boundaryOf(contentType: string | undefined): string | undefined {
  if (!contentType) return undefined;
  const m = /;\s*boundary\s*=\s*(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  const boundary = m?.[1] ?? m?.[2];
  // RFC 2046 §5.1.1: 1 to 70 characters.
  return boundary && boundary.length <= 70 ? boundary : undefined;
}

/** A parameter of a media type (`type`, `transfer-syntax`), unquoted; undefined if absent. */
export function mediaTypeParameter(contentType: string, name: string): string | undefined {
  const re = new RegExp(`;\\s*${name}\\s*=\\s*(?:"([^"]*)"|([^;\\s]+))`, 'i');
  const m = re.exec(contentType);
  return m ? (m[1] ?? m[2]) : undefined;
}

/** The media type without parameters, lower-cased. */
export function baseMediaType(contentType: string | undefined): string {
  return (contentType ?? '').split(';')[0]!.trim().toLowerCase();
}

type State = 'preamble' | 'after-delimiter' | 'headers' | 'body' | 'epilogue';

/**
 * Reads parts from `source` (any async iterable of bytes: an HTTP request or response body).
 * Yields `part` (headers, names lower-cased), then `data` chunks, then `end-part`, per part.
 * Throws StudyError('bad_multipart') when the body is not a complete multipart entity.
 */
export async function* readMultipart(
  source: AsyncIterable<Buffer | Uint8Array | string>,
  boundary: string,
): AsyncGenerator<MultipartEvent> {
  // The first delimiter may start the body without a preceding CRLF (RFC 2046 §5.1.1: the
  // CRLF belongs to the delimiter); pretending one came first makes every delimiter alike.
  const delimiter = Buffer.from(`\r\n--${boundary}`);
  let buffer: Buffer = Buffer.from(CRLF);
  let state: State = 'preamble';
  let sawClose = false;

  for await (const raw of source) {
    const chunk = asBuffer(raw);
    if (state === 'epilogue') continue; // drain: RFC 2046 says ignore the epilogue
    buffer = buffer.length === 0 ? chunk : Buffer.concat([buffer, chunk]);
    for (;;) {
      if (state === 'preamble') {
        const at = buffer.indexOf(delimiter);
        if (at < 0) {
          // Keep only what could be the start of a delimiter.
          buffer = buffer.subarray(Math.max(0, buffer.length - delimiter.length + 1));
          break;
        }
        buffer = buffer.subarray(at + delimiter.length);
        state = 'after-delimiter';
      }
      if (state === 'after-delimiter') {
        if (buffer.length < 2) break;
        if (buffer[0] === 0x2d && buffer[1] === 0x2d) {
          state = 'epilogue';
          sawClose = true;
          buffer = Buffer.alloc(0);
          break;
        }
        // Transport padding (linear white space) may follow the boundary before CRLF.
        const eol = buffer.indexOf(CRLF);
        if (eol < 0) {
          if (buffer.length > 1024) throw bad('no line break after a boundary');
          break;
        }
        if (!/^[ \t]*$/.test(buffer.subarray(0, eol).toString('latin1')))
          throw bad('unexpected characters after a boundary');
        buffer = buffer.subarray(eol + 2);
        state = 'headers';
      }
      if (state === 'headers') {
        // A part with no header lines starts with the blank line straight away.
        let headerText: string;
        if (buffer.length >= 2 && buffer[0] === 0x0d && buffer[1] === 0x0a) {
          headerText = '';
          buffer = buffer.subarray(2);
        } else {
          const end = buffer.indexOf(HEADER_END);
          if (end < 0) {
            if (buffer.length > MAX_HEADER_BYTES) throw bad('part headers too long');
            break;
          }
          headerText = buffer.subarray(0, end).toString('latin1');
          buffer = buffer.subarray(end + 4);
        }
        yield { type: 'part', headers: parseHeaders(headerText) };
        state = 'body';
      }
      if (state === 'body') {
        const at = buffer.indexOf(delimiter);
        if (at < 0) {
          // Everything but a possible delimiter prefix at the end is body.
          const keep = Math.min(buffer.length, delimiter.length - 1);
          const out = buffer.subarray(0, buffer.length - keep);
          // Views, not copies: `buffer` is never written to, only replaced.
          if (out.length > 0) yield { type: 'data', chunk: out };
          buffer = buffer.subarray(buffer.length - keep);
          break;
        }
        if (at > 0) yield { type: 'data', chunk: buffer.subarray(0, at) };
        yield { type: 'end-part' };
        buffer = buffer.subarray(at + delimiter.length);
        state = 'after-delimiter';
        continue;
      }
      if (state === 'epilogue') break;
    }
  }
  if (!sawClose) {
    throw bad(
      state === 'preamble' ? 'no boundary found in the body' : 'the body ended inside a part',
    );
  }
}

function parseHeaders(text: string): Record<string, string> {
  const headers: Record<string, string> = {};
  // Folded header lines (RFC 5322 §2.2.3) continue with white space.
  for (const line of text.split('\r\n').reduce<string[]>((acc, l) => {
    if (/^[ \t]/.test(l) && acc.length > 0) acc[acc.length - 1] += ` ${l.trim()}`;
    else acc.push(l);
    return acc;
  }, [])) {
    const colon = line.indexOf(':');
    if (colon <= 0) continue;
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  return headers;
}

function bad(message: string): StudyError {
  return new StudyError('bad_multipart', `multipart body: ${message}`);
}
