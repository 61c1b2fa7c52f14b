/**
 * bench/fhir-parse: the FHIR front door's reading of one body (parseResource: cost bound,
 * UTF-8, JSON.parse, duplicate keys, numbers a double cannot hold, polluting keys, lone
 * surrogates) in µs per KB, from 50 KB to FHIR_MAX_BODY_BYTES (5 MiB), for five shapes:
 * `bundle` (ServiceRequests in a transaction Bundle: the ordinary body), `long-string` (one
 * string), `escapes` (one string of \u escapes, whole surrogate pairs among them), `nested`
 * (arrays 99 deep, side by side, numbers inside) and `numbers` (long decimals that a double
 * holds). The value bound is lifted so that every body is read to its end. Linear reading shows
 * as a flat µs/KB column.
 * Usage: `node scripts/with-node.cjs --expose-gc -r @swc-node/register bench/fhir-parse/fhir-parse.bench.ts`
 */
import { parseResource } from '../../src/inbound-fhir/fhir-http';
import { machine, medianPerShape } from '../bench-utils';

type Shape = 'bundle' | 'long-string' | 'escapes' | 'nested' | 'numbers';

function repeatTo(head: string, item: (i: number) => string, tail: string, bytes: number): Buffer {
  const parts = [head];
  let size = head.length + tail.length;
  for (let i = 0; size < bytes; i++) {
    const next = `${i === 0 ? '' : ','}${item(i)}`;
    parts.push(next);
    size += next.length;
  }
  parts.push(tail);
  return Buffer.from(parts.join(''), 'utf8');
}

function serviceRequest(i: number): string {
  return JSON.stringify({
    fullUrl: `urn:uuid:00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
    resource: {
      resourceType: 'ServiceRequest',
      identifier: [{ system: 'urn:oid:1.2.3.4.5', value: `ACC${i}` }],
      status: 'active',
      intent: 'order',
      code: {
        coding: [{ system: 'http://loinc.org', code: '24590-2', display: 'MR Brain WO contrast' }],
        text: 'MRT Schädel nativ – Verlaufskontrolle',
      },
      subject: { reference: 'Patient/p1' },
      authoredOn: '2026-11-27T10:15:00+01:00',
      extension: [{ url: 'http://example.org/weight', valueDecimal: 72.5 }],
      note: [{ text: 'Z. n. Insult 2019 \u2013 Vergleich mit Vorbefund 😀' }],
    },
    request: { method: 'POST', url: 'ServiceRequest' },
  });
}

function build(shape: Shape, bytes: number): Buffer {
  switch (shape) {
    case 'bundle':
      return repeatTo(
        '{"resourceType":"Bundle","type":"transaction","entry":[',
        serviceRequest,
        ']}',
        bytes,
      );
    case 'long-string':
      return Buffer.from(`{"resourceType":"Basic","text":"${'a'.repeat(bytes - 40)}"}`, 'utf8');
    case 'escapes':
      return Buffer.from(
        `{"resourceType":"Basic","text":"${'\\u00e9\\n\\"\\ud83d\\ude00'.repeat(Math.ceil((bytes - 40) / 22))}"}`,
        'utf8',
      );
    case 'nested':
      return repeatTo(
        '{"resourceType":"Basic","x":[',
        (i) => `${'['.repeat(98)}${i}.25${']'.repeat(98)}`,
        ']}',
        bytes,
      );
    case 'numbers':
      return repeatTo(
        '{"resourceType":"Basic","x":[',
        (i) => (i % 2 ? '0.30000000000000004' : '3.14159265358979'),
        ']}',
        bytes,
      );
  }
}

/** A collection before each run (with --expose-gc), so that one run's garbage is not the next one's time. */
const collect = (globalThis as { gc?: () => void }).gc ?? (() => undefined);

function run(bytes: Buffer): number {
  collect();
  const started = process.hrtime.bigint();
  parseResource(bytes, Infinity);
  return Number(process.hrtime.bigint() - started) / 1e3;
}

const MAX_BODY = 5 * 1024 * 1024;
const sizes = [50_000, 500_000, MAX_BODY];
const results = medianPerShape(
  ['bundle', 'long-string', 'escapes', 'nested', 'numbers'] as const,
  sizes,
  build,
  run,
  (size) => (size >= MAX_BODY ? 7 : size >= 500_000 ? 15 : 50),
);
console.log(JSON.stringify({ bench: 'fhir-parse', machine: machine(), results }, null, 2));
