/**
 * bench/hl7-parse: parse + structure check + mapping time per KB of an HL7 v2 message, from
 * 1 KB to 10 MB, for two shapes built on the IHE SWF ORM^O01 fixture: `notes` (many NTE
 * segments with escapes: a long but ordinary message) and `repetitions` (one PID-3 of many
 * repetitions: the hostile shape of issue #15). Bounds are lifted so that the big messages are
 * mapped, not refused. Linear parsing shows as a flat µs/KB column.
 * Usage: `node scripts/with-node.cjs -r @swc-node/register bench/hl7-parse/hl7-parse.bench.ts`
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseHl7 } from '../../src/hl7/hl7-message';
import { checkStructure } from '../../src/hl7/hl7-structure.validator';
import { DEFAULT_HL7_ORDER_MAPPING_CONFIG } from '../../src/mappings/hl7-order.config';
import { mapHl7Message } from '../../src/mappings/hl7-order.mapping';
import { machine, medianPerShape } from '../bench-utils';

const TEMPLATE = readFileSync(
  join(__dirname, '..', '..', 'test', 'fixtures', 'hl7', 'orm-o01-v231-ihe-swf-zds.hl7'),
  'latin1',
)
  .split(/\r\n|\r|\n/)
  .filter(Boolean);
const UNBOUNDED = {
  maxSegments: Infinity,
  maxFieldsPerSegment: Infinity,
  maxRepetitions: Infinity,
  maxComponents: Infinity,
};

function build(shape: 'notes' | 'repetitions', targetBytes: number): Buffer {
  const base = TEMPLATE.join('\r').length;
  if (shape === 'notes') {
    const note = 'NTE|1||Patient history: prior MRI 2019 \\T\\ follow-up; see \\H\\report\\N\\.';
    const count = Math.max(0, Math.ceil((targetBytes - base) / (note.length + 1)));
    return Buffer.from(
      [...TEMPLATE, ...Array.from({ length: count }, () => note)].join('\r'),
      'latin1',
    );
  }
  const rep = '12345678^^^HOSP^MR';
  const count = Math.max(1, Math.ceil((targetBytes - base) / (rep.length + 1)));
  const lines = TEMPLATE.map((line) => {
    if (!line.startsWith('PID|')) return line;
    const f = line.split('|');
    f[3] = Array.from({ length: count }, () => rep).join('~');
    return f.join('|');
  });
  return Buffer.from(lines.join('\r'), 'latin1');
}

function run(bytes: Buffer): number {
  const started = process.hrtime.bigint();
  const message = parseHl7(bytes, UNBOUNDED);
  if (checkStructure(message).outcome !== 'accept') throw new Error('refused');
  mapHl7Message(message, DEFAULT_HL7_ORDER_MAPPING_CONFIG);
  return Number(process.hrtime.bigint() - started) / 1e3;
}

const sizes = [1_000, 100_000, 1_000_000, 10_000_000];
const results = medianPerShape(['notes', 'repetitions'] as const, sizes, build, run, (size) =>
  size >= 10_000_000 ? 3 : size >= 1_000_000 ? 5 : 50,
);
console.log(JSON.stringify({ bench: 'hl7-parse', machine: machine(), results }, null, 2));
