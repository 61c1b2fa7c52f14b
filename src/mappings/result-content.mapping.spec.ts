import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseResultContent, resultTextLines, shortCode } from './result-content.mapping';

const RESULTS = readFileSync(
  join(__dirname, '..', '..', 'test', 'fixtures', 'outbound', 'results-volumetry.json'),
);

describe('results report → neutral content', () => {
  it('reads findings with UCUM units, the impression and the flags', () => {
    const c = parseResultContent(RESULTS);
    expect(c.findings).toHaveLength(7);
    const left = c.findings.find((f) => f.structure === 'Left hippocampus')!;
    expect(left.flag).toBe('low');
    expect(left.measurements.map((m) => [m.quantity, m.ucum])).toEqual([
      ['volume', 'mL'],
      ['icv-fraction', '%'],
      ['percentile', '{percentile}'],
    ]);
    expect(c.impression).toMatch(/Left hippocampus/);
    expect(c.qcBypassed).toBe(false);
  });

  it('tolerates what a real report may lack or add', () => {
    const c = parseResultContent(
      JSON.stringify({
        findings: [
          { structure: ' Pons ', volume_ml: 14.2, percentile: 'n/a', unknown_score: 3 },
          { volume_ml: 1 },
          'not an object',
          { structure: 'Cerebellum', volume_ml: null, flag: 'weird' },
        ],
        impression: '  ',
        qc_bypassed: true,
        caveat: 'QC failure was bypassed on user request: interpret with caution.',
      }),
    );
    expect(c.findings.map((f) => [f.structure, f.measurements.length, f.flag])).toEqual([
      ['Pons', 1, undefined],
      ['Cerebellum', 0, undefined],
    ]);
    expect(c.impression).toBeUndefined();
    expect(c.qcBypassed).toBe(true);
    expect(resultTextLines(c)).toContain('Pons: 14.2 mL');
  });

  it('refuses what is not a JSON object', () => {
    expect(() => parseResultContent('[1,2]')).toThrow(/not a JSON object/);
    expect(() => parseResultContent('<xml/>')).toThrow();
  });

  it('keeps codes within 16 characters with a measurement suffix, distinct for a shared prefix', () => {
    const a = shortCode('total-intracranial-volume');
    const b = shortCode('total-intracranial-area');
    expect(a).not.toBe(b);
    expect(`${a}.V`.length).toBeLessThanOrEqual(16);
    expect(shortCode('pons')).toBe('PONS');
  });
});
