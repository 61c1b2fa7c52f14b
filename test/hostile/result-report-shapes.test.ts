import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Observation } from '@medplum/fhirtypes';
import { containedIssues, validateFhirResource } from '../../src/fhir/fhir-validator';
import { parseHl7 } from '../../src/hl7/hl7-message';
import { buildDiagnosticReport } from '../../src/mappings/fhir-result.mapping';
import { buildOru, type Hl7ResultSettings } from '../../src/mappings/hl7-result.mapping';
import { MAX_FINDINGS, parseResultContent } from '../../src/mappings/result-content.mapping';
import { buildMeasurementSr } from '../../src/outbound/dicom-result.builder';
import { dciodvfyErrors } from '../helpers/dicom-validators';
import { hl7Fixture } from '../helpers/hl7-fixtures';
import { publicationInput, sourceStudy } from '../outbound/publication-fixtures';

/**
 * Report shapes a real upstream sends, as the three documents publish them (the FHIR
 * DiagnosticReport through our R4 validation, the ORU as the RIS parses it, the SR through
 * dciodvfy and dsrdump):
 *
 * - a volumetry product localised for a Japanese site (structure names in kanji: 左海馬 left
 *   hippocampus, 右海馬 right hippocampus) and a lesion product listing each lesion under the
 *   same name. Every such structure was given one code (`X.V`, `LESION.V`) and one Tracking
 *   Unique Identifier: the RIS keeps one observation per OBR + OBX-3 + OBX-4, so the left
 *   volume was overwritten by the right one, and the SR said two structures were one tracked
 *   finding;
 * - an impression and a failure reason written over several lines (as a radiologist's report
 *   is): each line break went out as the hexadecimal escape `\X0D\\X0A\`, inside a TX line
 *   (whose hard returns are repetitions, v2.5.1 2A.2.78), an FT text (whose are `\.br\`) and
 *   an ST value (printable characters only, 2A.2.74): a RIS that does not decode hex data
 *   (optional in v2.5.1 2.7.6) shows `\X0D\\X0A\` in the middle of the report.
 */
const HL7: Hl7ResultSettings = {
  sendingApplication: 'IMAGING-AI-ADAPTER',
  sendingFacility: 'ADAPTER',
  defaultVersion: '2.5.1',
  textType: 'TX',
};
const NOW = new Date('2026-11-24T10:00:00Z');

function obxOf(text: string) {
  return parseHl7(text)
    .segmentsById('OBX')
    .map((s) => ({ type: s.value(2), code: s.value(3), sub: s.value(4), value: s.value(5) }));
}

describe('hostile: report shapes of real upstreams, as published', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'report-shapes-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const localisedAndRepeated = () =>
    parseResultContent(
      JSON.stringify({
        report_kind: 'results',
        findings: [
          { structure: '左海馬', volume_ml: 3.12, percentile: 4, flag: 'low' },
          { structure: '右海馬', volume_ml: 3.48, percentile: 31, flag: 'normal' },
          { structure: 'Lesion', volume_ml: 0.42 },
          { structure: 'Lesion', volume_ml: 1.21 },
          { structure: 'lesion', volume_ml: 0.05 },
        ],
        impression: '左海馬の萎縮。',
      }),
    );

  it('structures named alike or in a script without ASCII letters: one code and one tracking UID each', () => {
    const results = localisedAndRepeated();
    const input = publicationInput('DELIVERED', { results });

    // HL7: no two observations of the OBR share OBX-3 and OBX-4.
    const obx = obxOf(buildOru(input, undefined, HL7, 'IAA1', NOW).text);
    const keys = obx.map((o) => `${o.code}|${o.sub}`);
    expect(new Set(keys).size).toBe(keys.length);
    const volumes = obx.filter((o) => o.type === 'NM' && /\.V$/.test(o.code ?? ''));
    expect(volumes.map((o) => o.value)).toEqual(['3.12', '3.48', '0.42', '1.21', '0.05']);

    // FHIR: valid, and each measurement's code names one measurement.
    const dr = buildDiagnosticReport(input);
    expect([...validateFhirResource(dr), ...containedIssues(dr)]).toEqual([]);
    const codes = (dr.contained ?? [])
      .filter((r): r is Observation => r.resourceType === 'Observation')
      .map((o) => o.code.coding![0]!.code);
    expect(codes).toHaveLength(7);
    expect(new Set(codes).size).toBe(codes.length);

    // DICOM: valid; five measurement groups, five Tracking Unique Identifiers and Finding codes.
    const sr = join(dir, 'sr-shapes.dcm');
    writeFileSync(sr, buildMeasurementSr(input, sourceStudy(1), NOW));
    expect(dciodvfyErrors(sr)).toEqual([]);
    const tree = execFileSync('dsrdump', [sr], { encoding: 'utf8' });
    const uids = [...tree.matchAll(/"Tracking Unique Identifier"\)="([^"]+)"/g)].map((m) => m[1]);
    expect(uids).toHaveLength(5);
    expect(new Set(uids).size).toBe(5);
    const findings = [...tree.matchAll(/"Finding"\)=\(([^,]+),99IAA/g)].map((m) => m[1]);
    expect(findings).toHaveLength(5);
    expect(new Set(findings).size).toBe(5);
  });

  it('the same report read twice gives the same codes and tracking ids (a correction tracks the same findings)', () => {
    const ids = (c: ReturnType<typeof parseResultContent>) =>
      c.findings.map((f) => [f.trackingId, f.code, ...f.measurements.map((m) => m.code)]);
    expect(ids(localisedAndRepeated())).toEqual(ids(localisedAndRepeated()));
    // Codes stay within the 16 characters of a DICOM Code Value / a short CWE.1.
    for (const f of localisedAndRepeated().findings)
      for (const m of f.measurements) expect(m.code.length).toBeLessThanOrEqual(16);
  });

  it('texts over several lines: TX lines as repetitions, FT lines as \\.br\\, never a line break in an ST, no hexadecimal escapes', () => {
    const results = parseResultContent(
      JSON.stringify({
        report_kind: 'results',
        findings: [{ structure: 'Left hippocampus', volume_ml: 3.12, flag: 'low' }],
        impression:
          'Findings:\r\n1. Reduced left hippocampal volume (P4).\r\n2. No other volumetric abnormality.',
        caveat: 'Motion artefacts in the last slices.\nInterpret with caution.',
      }),
    );
    const input = publicationInput('DELIVERED', { results });

    const tx = buildOru(input, undefined, HL7, 'IAA1', NOW).text;
    expect(tx).not.toMatch(/\\X0[DA]/);
    const txObx = obxOf(tx);
    const report = parseHl7(tx)
      .segmentsById('OBX')
      .find((s) => s.value(3) === 'REPORT')!;
    const lines = Array.from({ length: report.repetitionCount(5) }, (_, i) =>
      report.value(5, i + 1),
    );
    expect(lines).toEqual([
      'Left hippocampus: 3.12 mL (low)',
      'Impression: Findings:',
      '1. Reduced left hippocampal volume (P4).',
      '2. No other volumetric abnormality.',
      'Caveat: Motion artefacts in the last slices.',
      'Interpret with caution.',
    ]);
    // The impression's own observation: text over lines is TX, one repetition a line.
    const impression = txObx.find((o) => o.code === 'IMPRESSION')!;
    expect(impression.type).toBe('TX');
    const impressionSegment = parseHl7(tx)
      .segmentsById('OBX')
      .find((s) => s.value(3) === 'IMPRESSION')!;
    expect(impressionSegment.repetitionCount(5)).toBe(3);
    // No ST holds anything but printable characters.
    for (const o of txObx.filter((x) => x.type === 'ST')) expect(o.value).not.toMatch(/[\r\n]/);

    const ft = buildOru(input, undefined, { ...HL7, textType: 'FT' }, 'IAA1', NOW).text;
    expect(ft).not.toMatch(/\\X0[DA]/);
    expect(ft).toContain(
      'Impression: Findings:\\.br\\1. Reduced left hippocampal volume (P4).\\.br\\2. No other volumetric abnormality.',
    );

    // A failure reason over lines: the ORU text and ORC-16 (CE.2, an ST) without line breaks.
    const failed = publicationInput('FAILED', {
      reason: 'Segmentation failed:\nno T1-weighted series found',
    });
    const oru = buildOru(failed, undefined, HL7, 'IAA2', NOW).text;
    expect(oru).not.toMatch(/\\X0[DA]/);
    const orc = parseHl7(oru).segment('ORC')!;
    expect(orc.value(16, 1, 2)).toMatch(/Segmentation failed: no T1-weighted series found$/);
  });

  it('a site device mapping with nothing printable as its UDI and a tab or line break in its name: OBR-32 names the device on one line, by its UID as the SR does', () => {
    // OBR-32 (NDL; CNN in component 1: ID number ^ family name, ST): before, the UDI went in
    // as written (`   `, `\X07\`, `\X09\\X0D\\X0A\`) and the name as `Brain\X09\Volumetry`,
    // where the SR (dicom-output.test.ts) names such a device by its Device Observer UID.
    for (const udi of ['   ', '\u0007', '\t\r\n']) {
      const input = publicationInput('DELIVERED', {});
      input.device = { ...input.device, udi, name: 'Brain\tVolumetry', version: '3.2\n1' };
      const text = buildOru(input, undefined, HL7, 'C-DEV', NOW).text;
      const obr = text.split('\r').find((s) => s.startsWith('OBR|'))!;
      expect(obr.split('|')[32]).toBe(`${input.device.uid}&Brain Volumetry 3.2 1`);
    }
  });

  it('a failure reason full of HL7 delimiters: ORC-16.2 stays within 199 characters as written (escaped), not only before escaping', () => {
    // ORC-16 (CE, 200 in v2.3) and its text CE.2 (ST, 199) are counted as encoded, escape
    // sequences included (v2.5.1 §2.5.5.2). The reason was cut at 199 characters before
    // escaping: an upstream reason of 199 `|` went out as 597 (`\F\` each).
    const failed = publicationInput('FAILED', {
      reason: `Segmentation failed at ${'|^&~\\'.repeat(60)}`,
    });
    const oru = buildOru(failed, undefined, HL7, 'IAA9', NOW).text;
    const orc = parseHl7(oru).segment('ORC')!;
    expect(orc.rawField(16).length).toBeLessThanOrEqual(200);
    expect(orc.rawField(16).split('^')[1]!.length).toBeLessThanOrEqual(199);
    // Still says what it is, and that it was shortened.
    expect(orc.value(16, 1, 2)).toMatch(/Segmentation failed at \|\^&~\\/);
    expect(orc.value(16, 1, 2)).toMatch(/shortened/);
  });

  it('Unicode line breaks (U+2028, U+2029, NEL) are line breaks too: a TX repetition each, ORC-16 one line', () => {
    // A report written on another platform (a word processor's LINE SEPARATOR, a mainframe's
    // NEL) went out as one line holding the separator, inside TX and inside ORC-16's ST.
    const results = parseResultContent(
      JSON.stringify({
        findings: [{ structure: 'Pons', volume_ml: 14.2 }],
        impression: 'No volumetric abnormality.\u2028Follow-up not required.',
        caveat: 'Mild motion.\u0085Interpret with caution.',
      }),
    );
    const tx = buildOru(
      publicationInput('DELIVERED', { results }),
      undefined,
      HL7,
      'IAA3',
      NOW,
    ).text;
    const report = parseHl7(tx)
      .segmentsById('OBX')
      .find((s) => s.value(3) === 'REPORT')!;
    const lines = Array.from({ length: report.repetitionCount(5) }, (_, i) =>
      report.value(5, i + 1),
    );
    expect(lines).toEqual([
      'Pons: 14.2 mL',
      'Impression: No volumetric abnormality.',
      'Follow-up not required.',
      'Caveat: Mild motion.',
      'Interpret with caution.',
    ]);
    expect(tx).not.toMatch(/[\u0085\u2028\u2029]/);

    const failed = publicationInput('FAILED', {
      reason: 'Segmentation failed:\u2029 no T1-weighted series found',
    });
    const orc = parseHl7(buildOru(failed, undefined, HL7, 'IAA4', NOW).text).segment('ORC')!;
    expect(orc.value(16, 1, 2)).toMatch(/Segmentation failed: no T1-weighted series found$/);
  });

  it('a report of 3,000 findings: the first MAX_FINDINGS published, the rest named as left out, each document built in bounded time', () => {
    // A lesion product on a broken run, or a hostile upstream: 3,000 findings in 300 KB of
    // JSON (32 MB may come). Before, every one went out: building and validating the
    // DiagnosticReport took 9 s and writing the SR 20 s of the event loop the MLLP intake
    // shares, again at every retry, for documents no reader can use (9,000 Observations).
    const findings = Array.from({ length: 3_000 }, (_, i) => ({
      structure: `Lesion ${i + 1}`,
      volume_ml: 0.05 + i / 100,
      icv_percent: 0.01,
      percentile: 50,
      flag: 'high',
    }));
    const results = parseResultContent(JSON.stringify({ report_kind: 'results', findings }));
    expect(results.findings).toHaveLength(MAX_FINDINGS);
    expect(results.findings.at(-1)!.structure).toBe(`Lesion ${MAX_FINDINGS}`);
    expect(results.leftOut).toContain(
      `2700 findings after the first ${MAX_FINDINGS} (Lesion ${MAX_FINDINGS + 1} … Lesion 3000): more than a report publishes as measurements`,
    );
    const input = publicationInput('DELIVERED', { results });
    const started = performance.now();
    const dr = buildDiagnosticReport(input);
    expect([...validateFhirResource(dr), ...containedIssues(dr)]).toEqual([]);
    buildOru(input, undefined, HL7, 'IAA3', NOW);
    const sr = join(dir, 'sr-many.dcm');
    writeFileSync(sr, buildMeasurementSr(input, sourceStudy(1), NOW));
    expect(performance.now() - started).toBeLessThan(15_000);
    expect(dciodvfyErrors(sr)).toEqual([]);
  });

  it('an impression written in decomposed Unicode (NFD) for a German RIS reading 8859/1: ö in Latin-1, never `o?`', () => {
    // Text prepared on macOS or by a Python pipeline arrives decomposed: ö as o + U+0308.
    // The ORU keeps the order's 8859/1 (test/fixtures/hl7/orm-o01-v24-latin1-crlf.hl7, the
    // Klinikum's ORBIS), whose bytes have ö but no combining diaeresis: it went out as `o?`.
    const original = parseHl7(hl7Fixture('orm-o01-v24-latin1-crlf'));
    const results = parseResultContent(
      JSON.stringify({
        report_kind: 'results',
        findings: [{ structure: 'Hippocampus links'.normalize('NFD'), volume_ml: 3.12 }],
        impression: 'Hippocampusvolumen vermindert, Atrophie möglich; Größe grenzwertig.'.normalize(
          'NFD',
        ),
      }),
    );
    const oru = buildOru(publicationInput('DELIVERED', { results }), original, HL7, 'IAA4', NOW);
    expect(parseHl7(oru.text).msh.value(18)).toBe('8859/1');
    const wire = oru.bytes.toString('latin1');
    expect(wire).toContain('Atrophie möglich; Größe grenzwertig.');
    expect(wire).not.toContain('?');
  });
  it('report text a Latin-1 RIS has no byte for keeps its meaning: ≥ as >=, → as ->, ő as o, never `?`', () => {
    // The upstream writes Unicode; the ORU keeps the order's 8859/1 (the Klinikum's ORBIS).
    // Before: every character outside 8859/1 went out as `?`, and "Volumen ≥ 5. Perzentile"
    // read "Volumen ? 5. Perzentile", a comparison lost in a clinical text.
    const original = parseHl7(hl7Fixture('orm-o01-v24-latin1-crlf'));
    const results = parseResultContent(
      JSON.stringify({
        report_kind: 'results',
        findings: [{ structure: 'Hippocampus links', volume_ml: 3.12 }],
        impression:
          'Hippocampusvolumen ≥ 5. Perzentile, Läsion ≤ 3 mm ≈ Vorbefund → Kontrolle; Dr. Kovács Ődön.',
      }),
    );
    const oru = buildOru(publicationInput('DELIVERED', { results }), original, HL7, 'IAA5', NOW);
    expect(parseHl7(oru.text).msh.value(18)).toBe('8859/1');
    const wire = oru.bytes.toString('latin1');
    expect(wire).toContain(
      'Hippocampusvolumen >= 5. Perzentile, Läsion <= 3 mm ~ Vorbefund -> Kontrolle; Dr. Kovács Odön.',
    );
    expect(wire).not.toContain('?');
  });

  it('typographic quotes, dashes and ellipses for a RIS that writes strict ISO 8859-1: ASCII, never the C1 control bytes 0x80–0x9F', () => {
    // ISO 8859-1 has no ’ “ ” – …; Windows-1252 puts them at 0x80–0x9F, where 8859-1 has C1
    // control codes (0x85 is NEL, a line break to some receivers). Before: an upstream
    // impression with them reached the Klinikum's ORBIS (plain 8859/1) as those bytes.
    const original = parseHl7(hl7Fixture('orm-o01-v24-latin1-crlf'));
    const results = parseResultContent(
      JSON.stringify({
        report_kind: 'results',
        findings: [{ structure: 'Hippocampus links', volume_ml: 3.12 }],
        impression: '„Atrophie“ – wahrscheinlich… ‘grenzwertig’ (Befund € 0)',
      }),
    );
    const oru = buildOru(publicationInput('DELIVERED', { results }), original, HL7, 'IAA6', NOW);
    expect(oru.bytes.some((b) => b >= 0x80 && b <= 0x9f)).toBe(false);
    expect(oru.bytes.toString('latin1')).toContain(
      '"Atrophie" - wahrscheinlich... \'grenzwertig\' (Befund EUR 0)',
    );
  });
});
