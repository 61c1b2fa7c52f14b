import type { AssigningAuthority } from '../domain/order-request';
import { createWriteStream } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { once } from 'node:events';
import { Agent, request } from 'undici';
import { PeerBase } from '../common/peer-url';
import { baseMediaType, boundaryOf, readMultipart } from './multipart-related.parser';
import { closeQuietly, closeStream } from './file-streams';
import { StudyError } from './study.error';
import { hasMatchingCharacters } from './study-identity';
import { withoutPadding } from '../mappings/dicom-identifiers';
import { readBodyText } from '../common/bounded-body';

/** The most of a QIDO-RS answer we read (one study's match, or the few an accession finds). */
const QIDO_ANSWER_MAX_BYTES = 16 * 1024 * 1024;
/**
 * Bytes of a WADO-RS answer outside its parts' bodies we read, per part and once more: a part's
 * header lines (the parser holds at most 16 KiB of them) and its delimiter line (transport
 * padding of at most 1 KiB), with room to spare. A preamble or an epilogue needs none.
 */
const WADO_FRAMING_BYTES_PER_PART = 20 * 1024;

/**
 * A DICOMweb client for pulling a study from a PACS (PS3.18): QIDO-RS to find the study and
 * count its instances (§10.6), WADO-RS to retrieve it (§10.4) as multipart/related parts
 * written one by one to disk.
 */

/** One study as QIDO-RS describes it (DICOM JSON model, PS3.18 §F.2). */
export interface QidoStudy {
  studyInstanceUid: string;
  accessionNumber?: string;
  /** Patient ID (0010,0020), asked for with includefield: checked against the order's. */
  patientId?: string;
  /** Issuer of Patient ID (0010,0021), also asked for: the Patient ID's domain. */
  issuerOfPatientId?: string;
  /** Issuer of Accession Number Sequence (0008,0051), when the PACS answers it: first item. */
  issuerOfAccessionNumber?: AssigningAuthority;
  /** Number of Study Related Instances (0020,1208); undefined if the PACS omits it. */
  instanceCount?: number;
  seriesCount?: number;
}

export interface RetrievedFile {
  path: string;
  sizeBytes: number;
  contentType: string;
  /**
   * The SOP Class and Instance UID the C-STORE request of a C-GET sub-operation named (and
   * our File Meta Information carries): the data set must be that instance.
   */
  sop?: { sopClassUid: string; sopInstanceUid: string };
}

export interface DicomWebClientOptions {
  baseUrl: string;
  /** Sent as `Authorization: Bearer …` when the PACS needs one. */
  token?: string;
  /** Per request: time to the response headers, and between body chunks. */
  timeoutMs?: number;
  /**
   * Largest study retrieved (DICOMWEB_MAX_INSTANCES / DICOMWEB_MAX_BYTES; 10,000 / 4 GiB):
   * a QIDO-RS count above it is not retrieved; a WADO-RS answer that passes either while
   * streaming is cut off and its files removed (too_large).
   */
  maxInstances?: number;
  maxBytes?: number;
}

type DicomJson = Record<string, { vr?: string; Value?: unknown[] }>;
/** The attributes read from a QIDO-RS answer. */
const QIDO_TAGS = [
  '0020000D',
  '00080050',
  '00080051',
  '00100020',
  '00100021',
  '00201208',
  '00201206',
];

export class DicomWebClient {
  private readonly base: string;
  private readonly peer: PeerBase;
  /**
   * Our own connection pool, never the process-wide dispatcher: Node's built-in fetch installs
   * its bundled (older) undici as that dispatcher as soon as anything touches `fetch`,
   * `Response` or `Headers` — Nest's decorator metadata for `@Res() res: Response` does, at
   * boot. A `request()` without a dispatcher then runs on that HTTP/1 parser, which kills the
   * process with an uncatchable AssertionError (`assert(!this.paused)`, nodejs/undici#5360)
   * when the PACS closes the connection while a large retrieve's body is paused under
   * backpressure — seen under load as a replica dying mid-acquisition. The undici we depend
   * on (≥ 8) finishes such a response instead.
   */
  private readonly agent: Agent;

  constructor(private readonly options: DicomWebClientOptions) {
    this.base = options.baseUrl.replace(/\/+$/, '');
    this.peer = new PeerBase('PACS', options.baseUrl);
    this.agent = new Agent();
  }

  get maxInstances(): number {
    return this.options.maxInstances ?? 10_000;
  }

  /** Closes the pooled connections (the client is unusable afterwards). */
  async close(): Promise<void> {
    await this.agent.close();
  }

  /** QIDO-RS SearchForStudies by Study Instance UID or Accession Number (PS3.18 §10.6.1). */
  async findStudies(query: {
    studyInstanceUid?: string | null;
    accessionNumber?: string | null;
  }): Promise<QidoStudy[]> {
    const params = new URLSearchParams();
    const value = query.studyInstanceUid ?? query.accessionNumber;
    // A matching character would make the query match other patients' studies (PS3.4
    // §C.2.2.2.4): never sent, whatever the order holds (intake refuses such accessions too).
    if (value && hasMatchingCharacters(value))
      throw new StudyError(
        'invalid_study',
        'the order identifier holds DICOM matching characters (* ? \\); not queried',
      );
    // Padding only is zero length to the PACS: a universal match (PS3.4 §C.2.2.2.3).
    if (value && withoutPadding(value) === '')
      throw new StudyError('invalid_study', 'the order identifier is blank; not queried');
    if (query.studyInstanceUid) params.set('StudyInstanceUID', query.studyInstanceUid);
    else if (query.accessionNumber) params.set('AccessionNumber', query.accessionNumber);
    else return [];
    // Exact matching only (PS3.18 §8.3.4.1: fuzzy matching is off unless asked for).
    params.set('fuzzymatching', 'false');
    // Not every PACS returns the counts unless asked for (PS3.18 §10.6.3.3.1).
    params.append('includefield', '00201208');
    params.append('includefield', '00201206');
    params.append('includefield', '00100020');
    params.append('includefield', '00100021');
    params.append('includefield', '00080051');
    // A search answer is small: headers and body together end within the timeout (the
    // timeouts of `call` are idle times, which a PACS trickling a byte now and then never
    // trips: the acquisition would wait for ever).
    const timeout = this.timeoutMs;
    const signal = AbortSignal.timeout(timeout);
    const late = () =>
      new StudyError('pacs_unavailable', `QIDO-RS: no complete answer within ${timeout} ms`);
    const res = await this.call(
      'QIDO-RS',
      `${this.base}/studies?${params.toString()}`,
      { accept: 'application/dicom+json' },
      true,
      signal,
    ).catch((error: unknown) => {
      throw signal.aborted ? late() : error;
    });
    // 204 No Content: nothing matched (PS3.18 §10.6.3); some servers answer 404 instead.
    if (res.statusCode === 204 || res.statusCode === 404) {
      await res.body.dump();
      return [];
    }
    let text: string;
    try {
      text = await readBodyText(res.body, QIDO_ANSWER_MAX_BYTES);
    } catch (error) {
      if (signal.aborted) throw late();
      throw new StudyError('pacs_error', `QIDO-RS: ${(error as Error).message}`, { cause: error });
    }
    if (text.trim() === '') return [];
    let items: DicomJson[];
    try {
      items = JSON.parse(text) as DicomJson[];
    } catch (error) {
      throw new StudyError('pacs_error', 'QIDO-RS answer is not DICOM JSON', { cause: error });
    }
    if (!Array.isArray(items)) throw new StudyError('pacs_error', 'QIDO-RS answer is not a list');
    // Each entry an object, each attribute's Value a list (PS3.18 §F.2.2, §F.2.4): `null`
    // entries or `"Value": "1.2.3"` threw a TypeError (and "1.2.3"[0], "1", was read as the
    // Study Instance UID), so the acquisition ended in an exception instead of an answer.
    for (const item of items as unknown[]) {
      if (typeof item !== 'object' || item === null || Array.isArray(item))
        throw new StudyError(
          'pacs_error',
          'QIDO-RS answer is not DICOM JSON (an entry is not an object)',
        );
      for (const tag of QIDO_TAGS) {
        const el = (item as DicomJson)[tag] as unknown;
        if (el === undefined || el === null) continue;
        const value = typeof el === 'object' ? (el as { Value?: unknown }).Value : el;
        if (typeof el !== 'object' || (value !== undefined && !Array.isArray(value)))
          throw new StudyError(
            'pacs_error',
            `QIDO-RS answer is not DICOM JSON (${tag} has no list of values)`,
          );
      }
    }
    return items
      .map((item) => ({
        studyInstanceUid: uid(item['0020000D']) ?? '',
        accessionNumber: identifierValue(item['00080050']),
        patientId: identifierValue(item['00100020']),
        issuerOfPatientId: identifierValue(item['00100021']),
        ...issuerOfAccession(item['00080051']),
        instanceCount: int(item['00201208']),
        seriesCount: int(item['00201206']),
      }))
      .filter((s) => s.studyInstanceUid !== '');
  }

  /**
   * WADO-RS RetrieveStudy (PS3.18 §10.4.1.1.1): every instance as application/dicom in its
   * stored transfer syntax (`transfer-syntax=*`, §8.7.3.5.2), each part streamed to
   * `<dir>/<n>.dcm`. Returns the files written; on error, the files written so far are
   * removed.
   */
  async retrieveStudy(studyInstanceUid: string, dir: string): Promise<RetrievedFile[]> {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const url = `${this.base}/studies/${encodeURIComponent(studyInstanceUid)}`;
    let res: Awaited<ReturnType<typeof request>>;
    try {
      res = await this.call('WADO-RS', url, {
        accept: 'multipart/related; type="application/dicom"; transfer-syntax=*',
      });
    } catch (error) {
      // A server that does not offer `transfer-syntax=*` answers 406 (PS3.18 §8.3.3.1); then
      // take its default, Explicit VR Little Endian (§8.7.3.5.2), transcoded by the PACS.
      if (!(error instanceof StudyError && error.httpStatus === 406)) throw error;
      res = await this.call('WADO-RS', url, {
        accept: 'multipart/related; type="application/dicom"',
      });
    }
    if (res.statusCode === 206) {
      // Partial Content (PS3.18 §10.4.3): the PACS could return only some of the instances.
      // A part of a study is never packaged as the study; the order waits and asks again.
      await res.body.dump();
      throw new StudyError(
        'pacs_unavailable',
        'WADO-RS answered 206 Partial Content: the PACS could not send every instance',
        { httpStatus: 206 },
      );
    }
    const contentType = String(res.headers['content-type'] ?? '');
    const boundary = boundaryOf(contentType);
    if (baseMediaType(contentType) !== 'multipart/related' || !boundary) {
      await res.body.dump();
      throw new StudyError(
        'pacs_error',
        `WADO-RS answered ${baseMediaType(contentType) || 'no content type'}, not multipart/related`,
      );
    }
    const files: RetrievedFile[] = [];
    let out: ReturnType<typeof createWriteStream> | undefined;
    let current: RetrievedFile | undefined;
    const maxBytes = this.options.maxBytes ?? 4 * 1024 ** 3;
    let bytes = 0;
    // Every byte of the answer is counted, not only the parts' bodies: bytes outside them (a
    // preamble that never reaches a boundary, an epilogue that never ends) are skipped by the
    // parser with nothing yielded, so a PACS streaming them held the acquisition for ever.
    const body = res.body;
    let received = 0;
    async function* counted(): AsyncGenerator<Buffer> {
      for await (const chunk of body as AsyncIterable<Buffer>) {
        // Checked before the chunk is read: what came before it is parts' bodies (yielded
        // by now, but a delimiter's length) or their framing.
        const framing = (files.length + 1) * WADO_FRAMING_BYTES_PER_PART;
        if (received - bytes > framing)
          throw new StudyError(
            'pacs_error',
            `WADO-RS answer holds more than ${framing} bytes outside its parts (a preamble or epilogue without end); not read further`,
          );
        received += chunk.length;
        yield chunk;
      }
    }
    try {
      for await (const event of readMultipart(counted(), boundary)) {
        if (event.type === 'part') {
          // The QIDO-RS count was within the limit; a PACS that sends more is not believed.
          if (files.length >= this.maxInstances)
            throw new StudyError(
              'too_large',
              `WADO-RS sent more than ${this.maxInstances} instances (DICOMWEB_MAX_INSTANCES)`,
            );
          current = {
            path: join(dir, `${String(files.length + 1).padStart(6, '0')}.dcm`),
            sizeBytes: 0,
            contentType: event.headers['content-type'] ?? '',
          };
          out = createWriteStream(current.path, { mode: 0o600 });
          files.push(current);
        } else if (event.type === 'data') {
          current!.sizeBytes += event.chunk.length;
          bytes += event.chunk.length;
          if (bytes > maxBytes)
            throw new StudyError(
              'too_large',
              `the study is larger than ${maxBytes} bytes (DICOMWEB_MAX_BYTES)`,
            );
          if (!out!.write(event.chunk)) await once(out!, 'drain');
        } else {
          await closeStream(out!);
          out = undefined;
        }
      }
    } catch (error) {
      // Finish (not destroy) the file: destroying it with writes in flight makes fs report
      // them as failed writes after we have moved on.
      if (out) await closeQuietly(out);
      res.body.destroy();
      await Promise.all(files.map((f) => rm(f.path, { force: true })));
      // A body that stops inside a part, or holds no boundary at all, is a retrieve that broke
      // off (cut by a proxy, a server stopping mid-answer): waited for and retried, as a
      // reset connection is, never taken for a complete study.
      if (error instanceof StudyError && error.code === 'bad_multipart')
        throw new StudyError('pacs_unavailable', `WADO-RS retrieve broke off: ${error.message}`, {
          cause: error,
        });
      if (error instanceof StudyError) throw error;
      throw new StudyError(
        'pacs_unavailable',
        `WADO-RS retrieve broke off: ${(error as Error).message}`,
        { cause: error },
      );
    }
    return files;
  }

  private get timeoutMs(): number {
    return this.options.timeoutMs ?? 60_000;
  }

  private async call(
    what: 'QIDO-RS' | 'WADO-RS',
    url: string,
    headers: Record<string, string>,
    allow404 = false,
    signal?: AbortSignal,
  ) {
    // Only within DICOMWEB_URL, where DICOMWEB_TOKEN belongs (docs/security.md); undici's
    // request() follows no redirect.
    if (!this.peer.contains(url))
      throw new StudyError('pacs_error', 'refused to request a URL outside DICOMWEB_URL');
    const timeout = this.timeoutMs;
    let res: Awaited<ReturnType<typeof request>>;
    try {
      res = await request(url, {
        dispatcher: this.agent,
        method: 'GET',
        headers: {
          ...headers,
          // Uncompressed: without Accept-Encoding any content coding is acceptable (RFC 9110
          // §12.5.3), and we read none (a gzip answer was "not DICOM JSON", or a WADO-RS retrieve
          // that "broke off" and was asked again every 30 s until the order's deadline).
          'accept-encoding': 'identity',
          ...(this.options.token ? { authorization: `Bearer ${this.options.token}` } : {}),
        },
        headersTimeout: timeout,
        bodyTimeout: timeout,
        ...(signal ? { signal } : {}),
      });
    } catch (error) {
      throw new StudyError('pacs_unavailable', `PACS unreachable: ${(error as Error).message}`, {
        cause: error,
      });
    }
    const encoding = String(res.headers['content-encoding'] ?? '')
      .trim()
      .toLowerCase();
    if (encoding !== '' && encoding !== 'identity') {
      await res.body.dump();
      throw new StudyError(
        'pacs_error',
        `${what} answered with Content-Encoding ${encoding.slice(0, 40).replace(/[^\x20-\x7e]/g, '?')}, though asked for identity (uncompressed)`,
        { httpStatus: res.statusCode },
      );
    }
    if ((res.statusCode >= 200 && res.statusCode < 300) || (allow404 && res.statusCode === 404))
      return res;
    await res.body.dump();
    // 5xx, 429 and 408 pass; 401/403 mean our credentials or the PACS's configuration,
    // which an operator fixes: all are worth waiting for rather than failing the order.
    const transient = res.statusCode >= 500 || [401, 403, 408, 429].includes(res.statusCode);
    throw new StudyError(
      transient ? 'pacs_unavailable' : 'pacs_error',
      `PACS answered HTTP ${res.statusCode}`,
      { httpStatus: res.statusCode },
    );
  }
}

/**
 * A UI value: its padding removed. PS3.5 §9.1 pads a UID of odd length with one trailing NUL;
 * a PACS that turns its stored bytes into DICOM JSON without removing it answers `1.2.3\u0000`,
 * which is the UID 1.2.3 (it was refused as "not a UID", or, asked by that UID, taken for
 * another study: the order failed, or waited until its deadline). Anything else is checked as
 * it is (isDicomUid).
 */
function uid(el: { Value?: unknown[] } | undefined): string | undefined {
  const v = el?.Value?.[0];
  if (typeof v !== 'string') return undefined;
  const value = withoutPadding(v).trim();
  return value !== '' ? value : undefined;
}

/**
 * Accession Number / Patient ID (and its Issuer) as the PACS holds them: every value joined by `\\` (so
 * `ACC1\\ACC2` is not `ACC1`), nothing trimmed but padding (study-identity.ts compares).
 */
/**
 * The Issuer of Accession Number Sequence of a QIDO-RS answer (DICOM JSON, PS3.18 §F.2.2: a
 * sequence's Value is a list of objects): its first item's Local Namespace Entity ID,
 * Universal Entity ID and type. Nothing when absent, empty or not of that shape.
 */
function issuerOfAccession(
  el: unknown,
): { issuerOfAccessionNumber: AssigningAuthority } | Record<string, never> {
  const item = (el as { Value?: unknown[] } | undefined)?.Value?.[0];
  if (typeof item !== 'object' || item === null || Array.isArray(item)) return {};
  const part = (tag: string) => {
    const v = (item as DicomJson)[tag] as unknown;
    const values = typeof v === 'object' && v !== null ? (v as { Value?: unknown }).Value : v;
    return Array.isArray(values) ? identifierValue({ Value: values }) : undefined;
  };
  const out: AssigningAuthority = {};
  const namespace = part('00400031');
  const universalId = part('00400032');
  const universalIdType = part('00400033');
  if (namespace) out.namespace = namespace.trim();
  if (universalId) out.universalId = universalId.trim();
  if (universalIdType) out.universalIdType = universalIdType.trim();
  return out.namespace || out.universalId ? { issuerOfAccessionNumber: out } : {};
}

function identifierValue(el: { Value?: unknown[] } | undefined): string | undefined {
  const values = (el?.Value ?? []).filter((v): v is string => typeof v === 'string');
  const joined = values.join('\\');
  return joined.trim() !== '' ? joined : undefined;
}

function int(el: { Value?: unknown[] } | undefined): number | undefined {
  const v = el?.Value?.[0];
  const n = typeof v === 'number' ? v : typeof v === 'string' ? Number(v) : NaN;
  return Number.isInteger(n) ? n : undefined;
}
