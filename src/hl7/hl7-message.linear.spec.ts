import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { mapHl7Message } from '../mappings/hl7-order.mapping';
import { DEFAULT_HL7_ORDER_MAPPING_CONFIG } from '../mappings/hl7-order.config';
import { checkStructure } from './hl7-structure.validator';
import { parseHl7 } from './hl7-message';

/**
 * Issue #15 item 2: parsing and mapping are linear in the message. With the bounds lifted, a
 * PID-3 of N repetitions and N NTE segments are walked once each: doubling N roughly doubles
 * the time (quadratic walking made 20,000 repetitions take 24 s).
 */
const TEMPLATE = readFileSync(
  join(__dirname, '..', '..', 'test', 'fixtures', 'hl7', 'orm-o01-v231-ihe-swf-zds.hl7'),
  'latin1',
);
const UNBOUNDED = {
  maxSegments: Infinity,
  maxFieldsPerSegment: Infinity,
  maxRepetitions: Infinity,
  maxComponents: Infinity,
};

function heavy(n: number): string {
  const lines = TEMPLATE.split(/\r\n|\r|\n/).filter(Boolean);
  const out = lines.map((line) => {
    if (!line.startsWith('PID|')) return line;
    const f = line.split('|');
    f[3] = Array.from({ length: n }, (_, i) => `${i}^^^HOSP^MR`).join('~');
    return f.join('|');
  });
  for (let i = 0; i < n; i += 1) out.push(`NTE|${i}||note \\T\\ ${i}~second line`);
  return out.join('\r');
}

function timeMs(n: number): number {
  const text = heavy(n);
  const started = process.hrtime.bigint();
  const message = parseHl7(text, UNBOUNDED);
  expect(checkStructure(message).outcome).toBe('accept');
  const mapped = mapHl7Message(message, DEFAULT_HL7_ORDER_MAPPING_CONFIG);
  expect(mapped.orders[0]!.request.patient.identifiers.length).toBe(n);
  return Number(process.hrtime.bigint() - started) / 1e6;
}

describe('HL7 parsing and mapping are linear in the message', () => {
  it('20,000 and then 80,000 repetitions and NTE segments: time grows about linearly', () => {
    timeMs(2_000); // warm-up
    // the fastest of three of each: one collection or a neighbour's burst on a loaded CI machine
    // made a single 80,000 run 13 times the 20,000 one, with the code unchanged
    const fastest = (n: number) => Math.min(timeMs(n), timeMs(n), timeMs(n));
    const small = fastest(20_000);
    const large = fastest(80_000);
    // 4× the input; quadratic would be 16×. Generous for a loaded machine.
    expect(large / small).toBeLessThan(9);
    expect(large).toBeLessThan(10_000);
  }, 60_000);

  it('the default bounds refuse such a message before any mapping', () => {
    const message = parseHl7(heavy(20_000));
    const check = checkStructure(message);
    expect(check.outcome).toBe('reject');
    expect(check.errors.map((e) => e.location)).toEqual(['PID-3', 'NTE[4995]-1']);
  });
});
