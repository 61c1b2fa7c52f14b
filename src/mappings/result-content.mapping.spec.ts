import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  boundedText,
  decimalText,
  MAX_FINDINGS,
  MAX_TEXT,
  parseResultContent,
  resultTextLines,
  shortCode,
} from './result-content.mapping';

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

  it('reads a flag however the report spells it (H, High, HIGH, l, Normal); one it cannot read is named as left out', () => {
    // An abnormal flag dropped for its spelling was a low hippocampus published without its L
    // (OBX-8, Observation.interpretation, the SR), the clinician not told.
    const c = parseResultContent(
      JSON.stringify({
        findings: [
          { structure: 'Left hippocampus', volume_ml: 2.61, flag: 'L' },
          { structure: 'Right hippocampus', volume_ml: 3.9, flag: ' High ' },
          { structure: 'Amygdala', volume_ml: 1.4, flag: 'HIGH' },
          { structure: 'Pons', volume_ml: 14.2, flag: 'Normal' },
          { structure: 'Thalamus', volume_ml: 7.1, flag: 'n' },
          { structure: 'Cerebellum', volume_ml: 120.5, flag: 'borderline' },
          { structure: 'Vermis', volume_ml: 5.5, flag: 'constructor' },
        ],
      }),
    );
    expect(c.findings.map((f) => [f.structure, f.flag])).toEqual([
      ['Left hippocampus', 'low'],
      ['Right hippocampus', 'high'],
      ['Amygdala', 'high'],
      ['Pons', 'normal'],
      ['Thalamus', 'normal'],
      ['Cerebellum', undefined],
      ['Vermis', undefined],
    ]);
    expect(c.leftOut).toEqual([
      expect.stringMatching(/Cerebellum flag "borderline"/),
      expect.stringMatching(/Vermis flag "constructor"/),
    ]);
  });

  it('qc_bypassed: any value but one that plainly says no is a bypass (the caution is the safe side)', () => {
    const said = (v: unknown) =>
      parseResultContent(JSON.stringify({ findings: [], qc_bypassed: v })).qcBypassed;
    for (const yes of [true, 'true', 'TRUE', 'yes', 1, 'Y', 'bypassed'])
      expect([yes, said(yes)]).toEqual([yes, true]);
    for (const no of [false, 'false', ' No ', 0, '0', '', null])
      expect([no, said(no)]).toEqual([no, false]);
    expect(parseResultContent(JSON.stringify({ findings: [] })).qcBypassed).toBe(false);
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

  it('gives each structure its own tracking id and code: kanji names, a name repeated, names slugged alike', () => {
    const c = parseResultContent(
      JSON.stringify({
        findings: [
          { structure: '左海馬', volume_ml: 3.1 },
          { structure: '右海馬', volume_ml: 3.4 },
          { structure: 'Noyau caudé', volume_ml: 3.9 },
          { structure: 'Lesion', volume_ml: 0.4 },
          { structure: 'Lesion', volume_ml: 1.2 },
          { structure: 'lesion', volume_ml: 0.1 },
        ],
      }),
    );
    const ids = c.findings.map((f) => f.trackingId);
    expect(ids[2]).toBe('noyau-caude');
    expect(ids.slice(3)).toEqual(['lesion', 'lesion-2', 'lesion-3']);
    expect(new Set(ids).size).toBe(6);
    const codes = c.findings.flatMap((f) => f.measurements.map((m) => m.code));
    expect(new Set(codes).size).toBe(6);
    // ASCII names keep the codes they had (the golden documents are unchanged)
    expect(parseResultContent(RESULTS).findings.map((f) => f.code)).toContain('LEFT-HIPPO-MN8');
  });

  it('a name repeated 20,000 times: the first MAX_FINDINGS published with distinct ids, the rest named, in linear time', () => {
    const findings = Array.from({ length: 20_000 }, () => ({ structure: 'Lesion', volume_ml: 1 }));
    const started = performance.now();
    const c = parseResultContent(JSON.stringify({ findings }));
    expect(c.findings).toHaveLength(MAX_FINDINGS);
    expect(new Set(c.findings.map((f) => f.code)).size).toBe(MAX_FINDINGS);
    expect(c.leftOut).toEqual([
      `${20_000 - MAX_FINDINGS} findings after the first ${MAX_FINDINGS} (Lesion … Lesion): more than a report publishes as measurements`,
    ]);
    expect(performance.now() - started).toBeLessThan(5_000);
  });
});

describe('measurement values as published', () => {
  it('decimalText: a plain decimal of at most 16 characters (DICOM DS, HL7 NM), no exponent', () => {
    expect(
      [
        1258.2000000000003, 0.30000000000000004, 1e-7, -4.61, 100, 999999999999999.9, 5e-324, -0,
      ].map(decimalText),
    ).toEqual(['1258.2', '0.3', '0.0000001', '-4.61', '100', '1000000000000000', '0', '0']);
  });

  it('values outside their quantity are left out, with why', () => {
    const c = parseResultContent(
      JSON.stringify({
        findings: [
          { structure: 'Pons', volume_ml: -1, icv_percent: 100.5, percentile: 50 },
          { structure: 'Cerebellum\u0007', volume_ml: 2e15, percentile: -0.5 },
        ],
      }),
    );
    expect(c.findings.map((f) => f.measurements.map((m) => m.text))).toEqual([['50'], []]);
    expect(c.leftOut).toEqual([
      'Pons volume_ml -1 (below 0)',
      'Pons icv_percent 100.5 (above 100)',
      'Cerebellum  volume_ml 2000000000000000 (too large to be a measurement)',
      'Cerebellum  percentile -0.5 (below 0)',
    ]);
  });
});

describe('report texts as published', () => {
  it('boundedText: at most max characters, whole code points, saying it was shortened', () => {
    expect(boundedText('Atrophy.', 100)).toBe('Atrophy.');
    // wherever the cut falls, never half of a surrogate pair
    for (let k = 40; k < 60; k++) {
      const cut = boundedText(`${'a'.repeat(k)}😀${'b'.repeat(100)}`, 100);
      expect(cut.length).toBeLessThanOrEqual(100);
      expect(cut).toMatch(/^a+(😀b*)? … \(shortened; the report has the whole text\)$/u);
    }
    const c = parseResultContent(
      JSON.stringify({
        findings: [{ structure: 'S'.repeat(500), volume_ml: 1 }],
        impression: 'i'.repeat(20_000),
      }),
    );
    expect(c.findings[0]!.structure.length).toBeLessThanOrEqual(MAX_TEXT.structure);
    expect(c.impression!.length).toBeLessThanOrEqual(MAX_TEXT.statement);
  });
});
