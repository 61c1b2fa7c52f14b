import type { Request, Response } from 'express';
import type { Resource } from '@medplum/fhirtypes';
import { bodyStallReason } from '../common/body-stall';
import { firstDuplicateKey } from '../common/json-duplicate-keys';
import { jsonPathText, scanJson, type JsonScan } from '../common/json-scan';
import { loneSurrogateMessage } from '../common/json-unicode';
import { walkJsonKeys } from '../common/json-walk';
import { describeJsonSyntaxError } from '../common/json-syntax';
import { FhirError, operationOutcome } from './fhir.error';
import { countFhirAnswer } from './fhir.metrics';

/**
 * HTTP details of the R4 RESTful API (http.html): media types and `_format`, `Prefer:
 * return=`, ETag/versionId, and the raw body, read here byte for byte (the app's JSON parser
 * skips /fhir so the audit log keeps exactly what was sent).
 */

export type FhirMediaType = 'application/fhir+json' | 'application/json';

/** Only its own keys: `_format=constructor` found Object's constructor (an octet-stream answer). */
const JSON_FORMATS: Readonly<Record<string, FhirMediaType>> = {
  json: 'application/fhir+json',
  'application/json': 'application/json',
  'application/fhir+json': 'application/fhir+json',
  // R4 http.html#mime: the DSTU2-era type is still seen from older clients.
  'application/json+fhir': 'application/fhir+json',
};
const XML_FORMATS = new Set([
  'xml',
  'text/xml',
  'application/xml',
  'application/fhir+xml',
  'application/xml+fhir',
  'ttl',
  'text/turtle',
]);

/** The media type to answer with: `_format` wins over Accept (R4 http.html#mime); XML and Turtle are not served. */
export function negotiateFormat(req: Request): FhirMediaType {
  return negotiate(req.query._format, req.headers.accept);
}

/**
 * The FHIR version a media type's `fhirVersion` parameter names (R4 http.html#version-parameter),
 * refused unless it is R4 (4.0, 4.0.1): a STU3 or R5 body read as R4 would be misread.
 */
function assertR4(
  params: string[],
  refuse: (version: string) => FhirError,
  readable: RegExp = R4_VERSION,
): void {
  for (const param of params) {
    const [name, value] = param.split('=').map((x) => x.trim().replace(/^"|"$/g, '').toLowerCase());
    if (name === 'fhirversion' && !readable.test(value ?? '')) throw refuse(value ?? '');
  }
}

const R4_VERSION = /^4\.0(\.\d+)?$/;
/**
 * R4 or R4B (4.3): what a Subscription notification may be labelled. R4B's notification
 * Bundle (a SubscriptionStatus first) is read by the notification parser, and the focus it
 * names is read back from the EHR as R4; only the notification endpoint takes it.
 */
const R4_OR_R4B_VERSION = /^4\.[03](\.\d+)?$/;

function jsonFormat(name: string): FhirMediaType | undefined {
  return Object.hasOwn(JSON_FORMATS, name) ? JSON_FORMATS[name] : undefined;
}

/** `negotiateFormat` from the values themselves (`_format`, Accept): also run for a refusal's record. */
export function negotiate(formatQuery: unknown, accept: string | undefined): FhirMediaType {
  const format = typeof formatQuery === 'string' ? formatQuery.trim().toLowerCase() : undefined;
  if (format !== undefined) {
    // A media type holds no white space: one inside is a `+` the query decoded as a space
    // (application/x-www-form-urlencoded), `_format=application/fhir+json` typed unescaped.
    const base = format.split(';')[0]!.trim().replace(/\s+/g, '+');
    const hit = jsonFormat(base);
    if (hit) return hit;
    throw new FhirError(
      'not-acceptable',
      `_format=${format} is not supported: this server speaks JSON only (json, application/fhir+json, application/json)`,
      [
        {
          severity: 'error',
          code: 'not-supported',
          diagnostics: `_format ${format} is not supported`,
          expression: ['_format'],
        },
      ],
    );
  }
  if (!accept) return 'application/fhir+json';
  const ranges = accept.split(',').map((t) => t.split(';'));
  for (const [, ...params] of ranges) {
    assertR4(
      params,
      (version) =>
        new FhirError(
          'not-acceptable',
          `Accept asks for FHIR version ${version}: this server speaks R4 (fhirVersion=4.0)`,
        ),
    );
  }
  // RFC 9110 §12.4.2: a range weighted q=0 is "not acceptable", not one more choice. A client
  // refusing JSON (`application/fhir+json;q=0, application/fhir+xml`) was answered JSON, 200.
  const refused = new Set(
    ranges
      .filter(([, ...params]) => params.some((p) => /^\s*q\s*=\s*0(\.0{0,3})?\s*$/i.test(p)))
      .map(([t]) => t!.trim().toLowerCase()),
  );
  const types = ranges.map(([t]) => t!.trim().toLowerCase()).filter((t) => !refused.has(t));
  const refusesJson =
    refused.has('*/*') ||
    refused.has('application/*') ||
    [...refused].some((t) => jsonFormat(t) !== undefined);
  for (const t of types) {
    const hit = jsonFormat(t);
    if (hit) return hit;
    if (t === '*/*' || t === 'application/*') {
      if (!refused.has('application/fhir+json')) return 'application/fhir+json';
      if (!refused.has('application/json')) return 'application/json';
    }
  }
  if (types.some((t) => XML_FORMATS.has(t))) {
    throw new FhirError(
      'not-acceptable',
      'XML and Turtle are not supported: ask for application/fhir+json',
    );
  }
  if (refusesJson) {
    throw new FhirError(
      'not-acceptable',
      'Accept refuses JSON (q=0), the only format this server speaks: ask for application/fhir+json',
    );
  }
  return 'application/fhir+json';
}

export interface RawBody {
  bytes: Buffer;
  contentType: string;
}

/** How much of a body over the limit is read and dropped before the connection is closed on it. */
const DRAIN_MAX_BYTES = 64 * 1024 * 1024;

/** How much of a body over the limit is kept for the audit log. */
export const KEPT_HEAD_BYTES = 64 * 1024;

/** The 413 of a body over `limit` (R4 issue type too-long, on the body as a whole). */
export function bodyTooLarge(limit: number): FhirError {
  const diagnostics = `the body exceeds ${limit} bytes (FHIR_MAX_BODY_BYTES)`;
  return new FhirError('too-large', diagnostics, [
    { severity: 'error', code: 'too-long', diagnostics, expression: ['(body)'] },
  ]);
}

/** The 408 of a body that stopped arriving (R4 issue type timeout); the connection closes. */
export function bodyStalled(reason: string): FhirError {
  const diagnostics = `the body ${reason}; send it again`;
  return new FhirError(
    'request-timeout',
    diagnostics,
    [{ severity: 'error', code: 'timeout', diagnostics, expression: ['(body)'] }],
    { Connection: 'close' },
  );
}

/**
 * Reads the whole body (up to `limit` bytes; 413 above it, or with `keepHead` its first
 * KEPT_HEAD_BYTES and `tooLarge`, for the refusal to be kept). A body over the limit is read
 * to its end and dropped (up to DRAIN_MAX_BYTES more), so that the 413 reaches the sender:
 * left unread, the socket was closed over it, and the sender often got a connection reset
 * (TCP RST) instead of the answer, and resent.
 */
export async function readRawBody(
  req: Request,
  limit: number,
  options: { keepHead?: boolean } = {},
): Promise<RawBody & { tooLarge?: number; stalled?: string }> {
  const contentType = (req.headers['content-type'] ?? 'application/fhir+json').toString();
  // A declared length past what would be read at all is answered at once, with what has come
  // so far as its head, and the connection closed: it was answered only once the drain gave
  // up (a reset, not the 413) or, from a sender waiting for an answer, never.
  if (Number(req.headers['content-length']) > limit + DRAIN_MAX_BYTES) {
    req.res?.setHeader('Connection', 'close');
    if (!options.keepHead) throw bodyTooLarge(limit);
    const arrived = (req.read() as Buffer | null) ?? Buffer.alloc(0);
    return { bytes: arrived.subarray(0, KEPT_HEAD_BYTES), contentType, tooLarge: limit };
  }
  const chunks: Buffer[] = [];
  let size = 0;
  // Leaving the loop must not destroy the request: its socket still carries the 413. (The
  // plain iterator's return() destroyed both; the operation then read a null req.socket and
  // failed with a TypeError, answering nothing and logging a failure of ours.)
  for await (const chunk of req.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size <= limit) chunks.push(chunk);
    else if (size > limit + DRAIN_MAX_BYTES) {
      // Past what is read at all (a chunked body has no length to judge at once): 413, closed.
      req.res?.setHeader('Connection', 'close');
      break;
    }
  }
  const bytes = Buffer.concat(chunks);
  // Cut short by its stall: what arrived is not the body (it may even parse); 408, or with
  // `keepHead` its head and `stalled`, for the refusal to be kept.
  const stalled = bodyStallReason(req);
  if (stalled !== undefined) {
    if (!options.keepHead) throw bodyStalled(stalled);
    return { bytes: bytes.subarray(0, KEPT_HEAD_BYTES), contentType, stalled };
  }
  if (size <= limit) return { bytes, contentType };
  if (!options.keepHead) throw bodyTooLarge(limit);
  return { bytes: bytes.subarray(0, KEPT_HEAD_BYTES), contentType, tooLarge: limit };
}

const XML_SPACE = new Set([0x20, 0x09, 0x0a, 0x0d]);

/**
 * Whether a body is XML: its first character past a byte order mark and white space is `<`,
 * which no JSON text begins with (RFC 8259 §2). The mark may be UTF-8 (EF BB BF) or UTF-16
 * (FF FE little-endian, FE FF big-endian: XML 1.0 §4.3.3 lets a document be UTF-16 with its
 * mark, as Windows tools write it); UTF-16 XML was 400 "not valid UTF-8", which named
 * neither the format nor what this server takes.
 */
export function looksLikeXml(body: Buffer): boolean {
  if (body[0] === 0xff && body[1] === 0xfe) return firstUtf16IsLt(body, 'le');
  if (body[0] === 0xfe && body[1] === 0xff) return firstUtf16IsLt(body, 'be');
  let i = body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf ? 3 : 0;
  while (i < body.length && XML_SPACE.has(body[i]!)) i += 1;
  return body[i] === 0x3c;
}

/** Past the UTF-16 mark and white space, whether the first code unit is `<`. */
function firstUtf16IsLt(body: Buffer, order: 'le' | 'be'): boolean {
  for (let i = 2; i + 1 < body.length; i += 2) {
    const unit = order === 'le' ? body[i]! | (body[i + 1]! << 8) : (body[i]! << 8) | body[i + 1]!;
    if (XML_SPACE.has(unit)) continue;
    return unit === 0x3c;
  }
  return false;
}

/**
 * 415 for a body sent with a content coding (RFC 9110 §8.4, §15.5.16: a coding the server does
 * not decode is 415), as STOW-RS answers it: the body is read as it came, so a gzip body was
 * 400 "not valid UTF-8" (nothing saying why), and a plain body labelled gzip was ordered as if
 * the label were not there. `identity` (or none) is the body as it is.
 */
function assertNoContentCoding(contentEncoding: string | undefined): void {
  const codings = (contentEncoding ?? '')
    .split(',')
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== '' && c !== 'identity');
  if (codings.length === 0) return;
  const diagnostics = `Content-Encoding ${codings.join(', ').slice(0, 40)} is not supported: send the body uncompressed`;
  throw new FhirError('unsupported-media-type', diagnostics, [
    { severity: 'error', code: 'not-supported', diagnostics, expression: ['(body)'] },
  ]);
}

/**
 * 415 unless the body was sent as JSON in UTF-8 (R4 http.html#mime: FHIR bodies are UTF-8; a
 * body declared in another charset would be read with the wrong characters). A body that is
 * XML (`body`, whatever its Content-Type: none, text/plain, application/fhir+xml) is 415
 * naming the format this server takes: sent without a Content-Type it was 400 "not valid
 * JSON: Unexpected token '<'", which told an interface engine configured for FHIR XML nothing.
 */
export function assertJsonMediaType(
  contentType: string,
  body?: Buffer,
  options: { notification?: boolean; contentEncoding?: string } = {},
): void {
  assertNoContentCoding(options.contentEncoding);
  if (body && looksLikeXml(body)) {
    const diagnostics =
      'the body is XML: this server takes FHIR JSON only; send the resource as JSON with Content-Type application/fhir+json';
    throw new FhirError('unsupported-media-type', diagnostics, [
      { severity: 'error', code: 'not-supported', diagnostics, expression: ['(body)'] },
    ]);
  }
  const [type, ...params] = contentType.split(';');
  const base = type!.trim().toLowerCase();
  if (!jsonFormat(base)) {
    throw new FhirError(
      'unsupported-media-type',
      `Content-Type ${base} is not supported: send application/fhir+json (or application/json)`,
    );
  }
  assertR4(
    params,
    (version) =>
      new FhirError(
        'unsupported-media-type',
        options.notification
          ? `Content-Type names FHIR version ${version}: this endpoint reads R4 (fhirVersion=4.0) and R4B (4.3) notifications`
          : `Content-Type names FHIR version ${version}: this server reads R4 (fhirVersion=4.0)`,
      ),
    options.notification ? R4_OR_R4B_VERSION : R4_VERSION,
  );
  for (const param of params) {
    const [name, value] = param.split('=').map((x) => x.trim().replace(/^"|"$/g, '').toLowerCase());
    if (name === 'charset' && value !== 'utf-8' && value !== 'utf8') {
      throw new FhirError(
        'unsupported-media-type',
        `charset ${value ?? ''} is not supported: FHIR bodies are UTF-8 (send charset=utf-8 or none)`,
      );
    }
  }
}

const STRICT_UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function unparseable(diagnostics: string, expression: string): FhirError {
  return new FhirError('unparseable', diagnostics, [
    { severity: 'error', code: 'structure', diagnostics, expression: [expression] },
  ]);
}

/**
 * Most JSON values (objects, arrays, strings, numbers, literals) one body may hold
 * (FHIR_MAX_JSON_VALUES), and deepest nesting. Checking, mapping and storing a body costs
 * about 5–10 µs of one core per value, all before the answer and on the event loop that also
 * answers /health: 2,500 ServiceRequests in one 3 MB Bundle held it for 2.4 s, 40,000
 * extensions for 1.2 s. 20,000 values is a Bundle of about 100 orders with their context.
 */
export const DEFAULT_MAX_JSON_VALUES = 20_000;
const MAX_JSON_DEPTH = 100;

/**
 * 413 (too-costly) when the body holds more JSON values than `maxValues` or nests deeper than
 * 100 (scanJson: one pass over the bytes before anything parses them, which also finds the
 * first number a double cannot hold and the first lone surrogate). Invalid JSON is left to
 * JSON.parse.
 */
export function assertJsonCost(bytes: Buffer, maxValues: number): JsonScan {
  const cost = scanJson(bytes, { maxValues, maxDepth: MAX_JSON_DEPTH });
  if (cost.exceeded === 'depth') throw tooCostly(`nests deeper than ${MAX_JSON_DEPTH} levels`);
  if (cost.exceeded === 'values') {
    throw tooCostly(
      `holds more than ${maxValues} JSON values (FHIR_MAX_JSON_VALUES): send fewer entries per Bundle or smaller resources`,
    );
  }
  return cost;
}

function tooCostly(what: string): FhirError {
  const diagnostics = `the body ${what}`;
  return new FhirError('too-large', diagnostics, [
    { severity: 'error', code: 'too-costly', diagnostics, expression: ['(body)'] },
  ]);
}

/** Parses a body into a resource; 400 with the position when it is not JSON or has no resourceType. */
export function parseResource(bytes: Buffer, maxJsonValues = DEFAULT_MAX_JSON_VALUES): Resource {
  if (bytes.length === 0)
    throw new FhirError('unparseable', 'the body is empty: a FHIR resource is expected');
  const scan = assertJsonCost(bytes, maxJsonValues);
  let text: string;
  try {
    text = STRICT_UTF8.decode(bytes).replace(/^\uFEFF/, '');
  } catch {
    // read leniently, the bytes that are not UTF-8 would become U+FFFD in stored values
    throw unparseable('the body is not valid UTF-8 (FHIR bodies are UTF-8)', '(body)');
  }
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (error) {
    // Never V8's own excerpt of the body: this answer is stored and shown to analysts.
    const why = describeJsonSyntaxError(error, text);
    throw new FhirError('unparseable', `the body is not valid JSON: ${why}`, [
      {
        severity: 'error',
        code: 'structure',
        diagnostics: `not valid JSON: ${why}`,
        expression: ['(body)'],
      },
    ]);
  }
  if (
    typeof data !== 'object' ||
    data === null ||
    Array.isArray(data) ||
    typeof (data as { resourceType?: unknown }).resourceType !== 'string'
  ) {
    throw new FhirError(
      'unparseable',
      'the body is JSON but not a FHIR resource (no resourceType)',
      [
        {
          severity: 'error',
          code: 'structure',
          diagnostics: 'a JSON object with resourceType is expected',
          expression: ['resourceType'],
        },
      ],
    );
  }
  const rootName = 'resourceType' in data ? String((data as Resource).resourceType) : '';
  const duplicate = firstDuplicateKey(text, rootName);
  if (duplicate) {
    throw unparseable(
      `${duplicate} appears twice in one object: each element may be given once (the body has no one meaning)`,
      duplicate,
    );
  }
  // Found by the cost pass; reported here, the body now known to be JSON.
  const number = scan.unfaithfulNumber && jsonPathText(scan.unfaithfulNumber, rootName);
  if (number) {
    const diagnostics = `${number} is a number a double cannot hold as written (beyond about 1e308, below about 1e-308, or more than 15-17 significant digits): read, it would be another value (1e-400 as 0); send it within those bounds`;
    throw new FhirError('invalid', diagnostics, [
      { severity: 'error', code: 'value', diagnostics, expression: [number] },
    ]);
  }
  const polluting = pollutingKey(data, rootName);
  if (polluting) {
    const diagnostics = `${polluting} is not a FHIR element: keys named __proto__, constructor or prototype are refused`;
    throw new FhirError('invalid', diagnostics, [
      { severity: 'error', code: 'structure', diagnostics, expression: [polluting] },
    ]);
  }
  // JSON.parse keeps a lone `\ud800` escape; stored, it became U+FFFD (jsonb cannot hold it)
  // and the order went on with a value the sender never wrote.
  const broken = scan.loneSurrogate && jsonPathText(scan.loneSurrogate, rootName);
  if (broken !== undefined) {
    const diagnostics = loneSurrogateMessage(broken);
    throw new FhirError('invalid', diagnostics, [
      { severity: 'error', code: 'invalid', diagnostics, expression: [broken] },
    ]);
  }
  return data as Resource;
}

const POLLUTING_KEYS = new Set(['__proto__', 'constructor', 'prototype']);

/**
 * The path of the first `__proto__`, `constructor` or `prototype` key at any depth (JSON.parse
 * keeps them as own properties; merged into another object later they could change its
 * prototype). No FHIR element has these names. Iterative, so deep nesting cannot overflow.
 */
function pollutingKey(root: unknown, rootName: string): string | undefined {
  let found: string | undefined;
  walkJsonKeys(root, rootName, (key, _value, path) => {
    if (!POLLUTING_KEYS.has(key)) return undefined;
    found = path;
    return 'stop';
  });
  return found;
}

export type PreferReturn = 'minimal' | 'representation' | 'OperationOutcome';

/** `Prefer: return=…` (R4 http.html#ops); representation when absent or unknown. */
export function preferReturn(req: Request): PreferReturn {
  const prefer = req.headers.prefer;
  const value = Array.isArray(prefer) ? prefer.join(',') : (prefer ?? '');
  const m = /return\s*=\s*"?([A-Za-z]+)"?/.exec(value);
  if (m?.[1] === 'minimal') return 'minimal';
  if (m?.[1] === 'OperationOutcome') return 'OperationOutcome';
  return 'representation';
}

/**
 * `Prefer: handling=strict` (R4 search.html#errors): the client wants an error for a search
 * parameter the server does not apply, instead of having it ignored.
 */
export function preferStrict(req: Request): boolean {
  const prefer = req.headers.prefer;
  const value = Array.isArray(prefer) ? prefer.join(',') : (prefer ?? '');
  return /(?:^|[,;\s])handling\s*=\s*"?strict"?/i.test(value);
}

export function weakEtag(versionId: string | number): string {
  return `W/"${versionId}"`;
}

/**
 * Whether an If-Match / If-None-Match value names the current version (RFC 9110 §13.1.1/§13.1.2,
 * R4 http.html#concurrency): `*` names any current representation, a list names each of its
 * entity tags, weak (`W/"3"`) or strong (`"3"`), compared weakly. A bare `3` (seen from older
 * clients) is taken as that version; anything else names no version.
 */
export function namesVersion(value: string, current: string): boolean {
  const text = value.trim();
  if (text === '*') return true;
  const tags = text.match(/(?:W\/)?"[^"]*"/g);
  if (!tags) return text === current;
  return tags.some((t) => t.replace(/^W\//, '').slice(1, -1) === current);
}

/** Sends a resource (or nothing, or an OperationOutcome) as R4 http.html asks, with ETag/Last-Modified when versioned. */
export function sendResource(
  res: Response,
  status: number,
  resource: Resource | undefined,
  format: FhirMediaType,
  options: { prefer?: PreferReturn; location?: string; informational?: string } = {},
): void {
  const meta = (resource as { meta?: { versionId?: string; lastUpdated?: string } } | undefined)
    ?.meta;
  if (meta?.versionId) res.setHeader('ETag', weakEtag(meta.versionId));
  if (meta?.lastUpdated) res.setHeader('Last-Modified', new Date(meta.lastUpdated).toUTCString());
  if (options.location) {
    res.setHeader('Location', options.location);
    if (status === 201) res.setHeader('Content-Location', options.location);
  }
  res.status(status);
  countFhirAnswer(res, status);
  const prefer = options.prefer ?? 'representation';
  if (prefer === 'minimal' || !resource) {
    res.end();
    return;
  }
  const body =
    prefer === 'OperationOutcome'
      ? operationOutcome([
          {
            severity: 'information',
            code: 'informational',
            diagnostics: options.informational ?? 'ok',
          },
        ])
      : resource;
  res.type(`${format}; charset=utf-8`).send(JSON.stringify(body));
}
