import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseHl7 } from '../../src/hl7';
import { DEFAULT_HL7_ORDER_MAPPING_CONFIG } from '../../src/mappings/hl7-order.config';
import { mapHl7Message } from '../../src/mappings/hl7-order.mapping';
import { buildEncapsulatedPdf, buildMeasurementSr } from '../../src/outbound/dicom-result.builder';
import { validForVr } from '../../src/outbound/dicom-vr';
import { parseResultContent } from '../../src/mappings/result-content.mapping';
import { dciodvfyErrors } from '../helpers/dicom-validators';
import { hl7Fixture } from '../helpers/hl7-fixtures';
import { publicationInput, REPORT_PDF, sourceStudy } from '../outbound/publication-fixtures';

/**
 * Issue #15 item 6: whatever an order held, the DICOM SR and encapsulated PDF we write are
 * valid for every element's VR (dciodvfy: 0 errors). The order comes through the real HL7
 * path: the IHE SWF ORM^O01 fixture with an ORC-2 carrying an escaped backslash and CR/LF
 * (`\E\`, `\X0D0A\`) and an 80-character OBR-4 text with escapes, as the issue observed.
 */
function hostileOrder() {
  const text = hl7Fixture('orm-o01-v231-ihe-swf-zds')
    .toString('latin1')
    .split(/\r\n|\r|\n/)
    .filter(Boolean)
    .map((line) => {
      const f = line.split('|');
      // The intake refuses a control character in an identifier (AE 102), so the placer number
      // carries only the DICOM delimiter; its line break is put in below, as an order stored
      // before that rule (or by another door) could hold it.
      if (f[0] === 'ORC') f[2] = 'PLC-1\\E\\EVIL';
      if (f[0] === 'OBR') {
        f[2] = 'PLC-1\\E\\EVIL';
        const c = (f[4] ?? '').split('^');
        c[1] = `MR BRAIN \\E\\ WITH\\X0D\\CONTRAST ${'X'.repeat(60)}`;
        f[4] = c.join('^');
      }
      return f.join('|');
    })
    .join('\r');
  const mapped = mapHl7Message(parseHl7(text), DEFAULT_HL7_ORDER_MAPPING_CONFIG);
  expect(mapped.outcome).not.toBe('error');
  return mapped.orders[0]!.request;
}

const dciodvfy = dciodvfyErrors;

describe('hostile: DICOM output is valid for its VRs whatever the input held', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'hostile-dicom-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('the hostile values really reach the builder (the test would catch a regression)', () => {
    const request = hostileOrder();
    expect(request.placerOrderNumber?.value).toContain('\\');
    expect(request.procedure?.display ?? '').toMatch(/\r/);
    expect((request.procedure?.display ?? '').length).toBeGreaterThan(64);
  });

  it('SR and encapsulated PDF: dciodvfy reports 0 errors; single values stay single, within length', () => {
    const request = hostileOrder();
    const input = publicationInput('DELIVERED', {});
    input.order = {
      ...input.order,
      request,
      placerOrderNumber: `${request.placerOrderNumber?.value ?? ''}\r\nLINE2`,
      accessionNumber: `${'A'.repeat(30)}\\B`,
    };
    const source = sourceStudy(2);
    source.attributes.patientName = `${'N'.repeat(80)}\\EVIL^Given\r\nLine`;
    source.attributes.studyDescription = `Study\u0007 ${'D'.repeat(100)}`;
    source.attributes.referringPhysicianName = 'Dr\\Evil^X';
    const now = new Date('2026-11-24T10:00:00Z');
    const sr = join(dir, 'sr.dcm');
    const pdf = join(dir, 'pdf.dcm');
    writeFileSync(sr, buildMeasurementSr(input, source, now));
    writeFileSync(pdf, buildEncapsulatedPdf(input, source, REPORT_PDF, now));
    expect({ sr: dciodvfy(sr), pdf: dciodvfy(pdf) }).toEqual({ sr: [], pdf: [] });

    const dump = execFileSync('dcmdump', ['+P', '0040,2016', '+P', '0008,0050', sr], {
      encoding: 'utf8',
    });
    // Placer order number: one value (no `\`), no CR/LF, at most 64 characters (LO).
    const placer = /\(0040,2016\) LO \[([^\]]*)\]/.exec(dump)?.[1] ?? '';
    expect(placer).toBe('PLC-1 EVIL LINE2');
    // dcmdump prints "# length, VM Keyword": one value.
    expect(dump.split('\n').find((l) => l.includes('(0040,2016)'))).toMatch(/#\s+\d+, 1 /);
    // Accession number: SH, 16 characters, one value.
    const accession = /\(0008,0050\) SH \[([^\]]*)\]/.exec(dump)?.[1] ?? '';
    expect(accession.length).toBeLessThanOrEqual(16);
    expect(accession).not.toContain('\\');
  });

  it('source study values of old or careless devices: dates and times in format, five name components, an enumerated sex', () => {
    const input = publicationInput('DELIVERED', {});
    const source = sourceStudy(1);
    // ACR-NEMA dates and times, a name with seven components, a sex in words, a day 40.
    Object.assign(source.attributes, {
      studyDate: '2026-11-20',
      studyTime: '10:15:30.25',
      patientBirthDate: '1961.04.09',
      patientName: 'Mueller-Lüdenscheidt^Hans^Peter^Dr.^med.^MSc^PhD',
      referringPhysicianName: 'Meier^Hans=マイヤー^ハンス',
      patientSex: 'female',
    });
    const now = new Date('2026-11-24T10:00:00Z');
    const sr = join(dir, 'sr-source.dcm');
    const pdf = join(dir, 'pdf-source.dcm');
    writeFileSync(sr, buildMeasurementSr(input, source, now));
    writeFileSync(pdf, buildEncapsulatedPdf(input, source, REPORT_PDF, now));
    expect({ sr: dciodvfy(sr), pdf: dciodvfy(pdf) }).toEqual({ sr: [], pdf: [] });
    const dump = execFileSync(
      'dcmdump',
      [
        '+P',
        '0008,0020',
        '+P',
        '0008,0030',
        '+P',
        '0010,0030',
        '+P',
        '0010,0010',
        '+P',
        '0010,0040',
        sr,
      ],
      { encoding: 'utf8' },
    );
    expect(dump).toContain('(0008,0020) DA [20261120]');
    expect(dump).toContain('(0008,0030) TM [101530.25]');
    expect(dump).toContain('(0010,0030) DA [19610409]');
    expect(dump).toContain('(0010,0010) PN [Mueller-Lüdenscheidt^Hans^Peter^Dr.^med. MSc PhD]');
    expect(dump).toMatch(/\(0010,0040\) CS \(no value available\)/);
  });

  it('the SR and PDF keep the ID domains of their study: Issuer of Patient ID and Issuer of Accession Number', () => {
    // A PACS shared by hospitals whose numbers overlap files objects by Patient ID with its
    // issuer (and the accession with its own): the study said PAT 12345 of HOSPA, ACC 42 of
    // RIS_A, and our SR said only 12345 and 42, to be filed under whichever domain the PACS
    // assumes for objects without one.
    const input = publicationInput('DELIVERED', {});
    const source = sourceStudy(1);
    Object.assign(source.attributes, {
      issuerOfPatientId: 'HOSPA',
      issuerOfAccessionNumber: {
        namespace: 'RIS_A',
        universalId: '1.2.826.0.1.3680043.10.42',
        universalIdType: 'ISO',
      },
    });
    const now = new Date('2026-11-24T10:00:00Z');
    const sr = join(dir, 'sr-issuers.dcm');
    const pdf = join(dir, 'pdf-issuers.dcm');
    writeFileSync(sr, buildMeasurementSr(input, source, now));
    writeFileSync(pdf, buildEncapsulatedPdf(input, source, REPORT_PDF, now));
    expect({ sr: dciodvfy(sr), pdf: dciodvfy(pdf) }).toEqual({ sr: [], pdf: [] });
    for (const file of [sr, pdf]) {
      const dump = execFileSync(
        'dcmdump',
        [
          '+P',
          '0010,0021',
          '+P',
          '0008,0051',
          '+P',
          '0040,0031',
          '+P',
          '0040,0032',
          '+P',
          '0040,0033',
          file,
        ],
        { encoding: 'utf8' },
      );
      expect(dump).toContain('(0010,0021) LO [HOSPA]');
      expect(dump).toContain('(0040,0031) UT [RIS_A]');
      expect(dump).toContain('(0040,0032) UT [1.2.826.0.1.3680043.10.42]');
      expect(dump).toContain('(0040,0033) CS [ISO]');
    }
    // an issuer that is not valid for its VR as it stands is written empty, never altered
    // into another domain's name
    source.attributes.issuerOfPatientId = 'HOSPA\\HOSP_B';
    writeFileSync(sr, buildMeasurementSr(input, source, now));
    expect(dciodvfy(sr)).toEqual([]);
    expect(execFileSync('dcmdump', ['+P', '0010,0021', sr], { encoding: 'utf8' })).not.toMatch(
      /HOSP/,
    );
  });

  it('an issuer of accession that is not valid as it stands (a control character, spaces): left out, never present and empty (Type 1C)', () => {
    // The namespace and universal ID are identifiers: not valid as they stand they were written
    // empty, and dciodvfy refused the SR and PDF ("present but empty", Type 1C).
    const now = new Date('2026-11-24T10:00:00Z');
    const cases = [
      { namespace: 'RIS\u0001A', universalId: '   ', universalIdType: 'ISO' },
      { namespace: '  ', universalId: '1.2.826.0.1\u001b$B', universalIdType: 'ISO' },
      { namespace: 'RIS\u0085A', universalId: '1.2.826.0.1.3680043.10.42' },
    ];
    for (const [n, issuer] of cases.entries()) {
      const input = publicationInput('DELIVERED', {});
      const source = sourceStudy(1);
      source.attributes.issuerOfAccessionNumber = issuer;
      const sr = join(dir, `sr-issuer-${n}.dcm`);
      const pdf = join(dir, `pdf-issuer-${n}.dcm`);
      writeFileSync(sr, buildMeasurementSr(input, source, now));
      writeFileSync(pdf, buildEncapsulatedPdf(input, source, REPORT_PDF, now));
      expect({ sr: dciodvfy(sr), pdf: dciodvfy(pdf) }).toEqual({ sr: [], pdf: [] });
      const dump = execFileSync('dcmdump', ['+P', '0040,0031', '+P', '0040,0032', sr], {
        encoding: 'utf8',
      });
      expect(dump).not.toMatch(/no value available|RIS|1\.2\.826\.0\.1\b(?!\.3680043)/);
      if (n === 2) expect(dump).toContain('(0040,0032) UT [1.2.826.0.1.3680043.10.42]');
    }
  });

  it('an Accession Number or Patient ID that is not valid for its VR is written empty, never altered into another one', () => {
    // Cut to 16 characters, `ACC-2026-000000000042` became `ACC-2026-0000000`, and
    // `PID-7\\8` became `PID-7 8`: identifiers of other exams and patients, on which a PACS
    // files (reconciles) what we send. An empty Type 2 value is valid and names nobody.
    const input = publicationInput('DELIVERED', {});
    input.order = { ...input.order, accessionNumber: 'ACC-2026-000000000042' };
    const source = sourceStudy(1);
    source.attributes.accessionNumber = undefined;
    source.attributes.patientId = 'PID-7\\8';
    const now = new Date('2026-11-24T10:00:00Z');
    const sr = join(dir, 'sr-ids.dcm');
    const pdf = join(dir, 'pdf-ids.dcm');
    writeFileSync(sr, buildMeasurementSr(input, source, now));
    writeFileSync(pdf, buildEncapsulatedPdf(input, source, REPORT_PDF, now));
    expect({ sr: dciodvfy(sr), pdf: dciodvfy(pdf) }).toEqual({ sr: [], pdf: [] });
    for (const file of [sr, pdf]) {
      const dump = execFileSync('dcmdump', ['+P', '0008,0050', '+P', '0010,0020', file], {
        encoding: 'utf8',
      });
      expect(dump).not.toMatch(/ACC-2026|PID-7/);
      expect(dump).toMatch(/\(0008,0050\) SH \(no value available\)/);
      expect(dump).toMatch(/\(0010,0020\) LO \(no value available\)/);
    }
  });

  it('a 16-character accession with umlauts (20 bytes in UTF-8) is written whole, within SH, not emptied', () => {
    // PS3.5 Table 6.2-1 gives SH 16 characters; dciodvfy counts the bytes as written, and in
    // UTF-8 `MÜNCHEN-ÄÖÜ-1234` is 20. The accession the RIS sent and the modality wrote in
    // ISO_IR 100 (16 bytes) was written empty in the SR and PDF: the PACS could no longer file
    // them with their exam. Values that all fit Latin-1 are now written in ISO_IR 100.
    const accession = 'MÜNCHEN-ÄÖÜ-1234';
    const input = publicationInput('DELIVERED', {});
    input.order = { ...input.order, accessionNumber: accession };
    const source = sourceStudy(1);
    source.attributes.accessionNumber = accession;
    const now = new Date('2026-11-24T10:00:00Z');
    const sr = join(dir, 'sr-latin1-accession.dcm');
    const pdf = join(dir, 'pdf-latin1-accession.dcm');
    writeFileSync(sr, buildMeasurementSr(input, source, now));
    writeFileSync(pdf, buildEncapsulatedPdf(input, source, REPORT_PDF, now));
    expect({ sr: dciodvfy(sr), pdf: dciodvfy(pdf) }).toEqual({ sr: [], pdf: [] });
    for (const file of [sr, pdf]) {
      const dump = execFileSync('dcmdump', ['+U8', '+P', '0008,0050', file], {
        encoding: 'utf8',
      });
      expect(dump).toContain(`(0008,0050) SH [${accession}]`);
    }
  });

  it('a 16-character accession with umlauts beside a Cyrillic name and a CJK impression: the UTF-8 SR and PDF keep it whole', () => {
    // Latin-1 cannot hold the name or the impression, so the SR is ISO_IR 192, where the
    // accession is 20 bytes. PS3.5 Table 6.2-1 gives SH 16 characters and it has 16; counted in
    // bytes it was written empty (in (0008,0050) and the Referenced Request Sequence), and the
    // PACS, which matches the accession's characters, could not file the SR with its exam.
    const accession = 'MÜNCHEN-ÄÖÜ-1234';
    const patientId = `PÄT-${'Ö'.repeat(55)}-0001`; // LO: 64 characters, 120 bytes
    const input = publicationInput('DELIVERED', {});
    input.order = { ...input.order, accessionNumber: accession };
    input.results = { ...input.results!, impression: '脳室の拡大なし。' };
    const source = sourceStudy(1);
    source.attributes.accessionNumber = accession;
    source.attributes.patientId = patientId;
    source.attributes.patientName = 'Иванов^Иван';
    const now = new Date('2026-11-24T10:00:00Z');
    const sr = join(dir, 'sr-utf8-accession.dcm');
    const pdf = join(dir, 'pdf-utf8-accession.dcm');
    writeFileSync(sr, buildMeasurementSr(input, source, now));
    writeFileSync(pdf, buildEncapsulatedPdf(input, source, REPORT_PDF, now));
    // dciodvfy counts bytes, not the characters PS3.5 counts: it reports the two identifiers'
    // lengths (20 > 16, 120 > 64) and nothing else.
    const beyondByteLengths = (file: string) =>
      dciodvfy(file).filter(
        (e) =>
          !/\((0x0008,0x0050\) SH Accession Number|0x0010,0x0020\) LO Patient ID).* - Length invalid for this VR = (20, expected <= 16|120, expected <= 64)$/.test(
            e,
          ) &&
          !/^Error - Dicom dataset contains invalid data values for Value Representations$/.test(e),
      );
    expect({ sr: beyondByteLengths(sr), pdf: beyondByteLengths(pdf) }).toEqual({ sr: [], pdf: [] });
    for (const file of [sr, pdf]) {
      const dump = execFileSync(
        'dcmdump',
        [
          '+L',
          '+U8',
          '+P',
          '0008,0005',
          '+P',
          '0008,0050',
          '+P',
          '0010,0010',
          '+P',
          '0010,0020',
          file,
        ],
        {
          encoding: 'utf8',
        },
      );
      expect(dump).toContain('(0008,0005) CS [ISO_IR 192]');
      expect(dump).toContain('PN [Иванов^Иван]');
      expect(dump).toContain(`(0010,0020) LO [${patientId}]`);
      // the SR has it twice: in the study and in the Referenced Request Sequence
      expect(dump.split(`SH [${accession}]`)).toHaveLength(file === sr ? 3 : 2);
      expect(dump).not.toMatch(/\(0008,0050\) SH \(no value available\)/);
    }
    expect(execFileSync('dsrdump', ['+U8', sr], { encoding: 'utf8' })).toContain(
      '脳室の拡大なし。',
    );
  });

  it('an identifier with a lone surrogate (a JSON \\ud800 escape): written empty, never as another identifier ending in U+FFFD', () => {
    // UTF-8 cannot hold a lone surrogate; the writer put U+FFFD in its place, so the SR and
    // PDF named a Patient ID and accession that were not the study's. Texts keep a U+FFFD.
    const input = publicationInput('DELIVERED', {});
    input.order = { ...input.order, accessionNumber: 'ACC-42\uDC00' };
    input.results = { ...input.results!, impression: 'No atrophy \uD83D.' };
    const source = sourceStudy(1);
    source.attributes.patientId = 'PID-1\uD800';
    delete source.attributes.accessionNumber;
    const now = new Date('2026-11-24T10:00:00Z');
    const sr = join(dir, 'sr-lone-surrogate.dcm');
    const pdf = join(dir, 'pdf-lone-surrogate.dcm');
    writeFileSync(sr, buildMeasurementSr(input, source, now));
    writeFileSync(pdf, buildEncapsulatedPdf(input, source, REPORT_PDF, now));
    expect({ sr: dciodvfy(sr), pdf: dciodvfy(pdf) }).toEqual({ sr: [], pdf: [] });
    for (const file of [sr, pdf]) {
      const dump = execFileSync('dcmdump', ['+U8', '+P', '0008,0050', '+P', '0010,0020', file], {
        encoding: 'utf8',
      });
      expect(dump).not.toMatch(/ACC-42|PID-1/);
      expect(dump).toMatch(/\(0010,0020\) LO \(no value available\)/);
    }
    expect(execFileSync('dsrdump', ['+U8', sr], { encoding: 'utf8' })).toContain(
      'No atrophy \ufffd.',
    );
  });

  it('a procedure code the SR cannot carry as it stands (spaces, a control character, a backslash): the generic code, never an empty or altered one', () => {
    // A site running unknown procedure codes through default products accepts OBR-4.1 of
    // spaces, `\X07\` (a BEL) or `MR\E\BR` (a backslash). Made valid for SH they became an
    // empty Code Value (dciodvfy: Type 1C empty; dsrdump could not read the SR at all,
    // "Invalid Value") or another code (`MR BR`).
    const config = {
      ...DEFAULT_HL7_ORDER_MAPPING_CONFIG,
      unknownProcedure: { kind: 'default-products' as const, products: ['neuro-volumetry'] },
    };
    const order = (obr4: string) => {
      const text = hl7Fixture('orm-o01-v231-ihe-swf-zds')
        .toString('latin1')
        .split(/\r\n|\r|\n/)
        .filter(Boolean)
        .map((line) => {
          const f = line.split('|');
          if (f[0] === 'OBR') f[4] = obr4;
          return f.join('|');
        })
        .join('\r');
      const mapped = mapHl7Message(parseHl7(text), config);
      expect(mapped.outcome).not.toBe('error');
      return mapped.orders[0]!.request;
    };
    for (const [name, obr4] of [
      ['spaces', '   ^MR Brain^L'],
      ['bel', '\\X07\\^\\X01\\^L'],
      ['backslash', 'MR\\E\\BR^MR Brain^L'],
    ] as const) {
      const request = order(obr4);
      expect(request.procedure?.code).toBeDefined();
      const input = publicationInput('DELIVERED', {});
      input.order = { ...input.order, request };
      const sr = join(dir, `sr-procedure-${name}.dcm`);
      writeFileSync(
        sr,
        buildMeasurementSr(input, sourceStudy(1), new Date('2026-11-24T10:00:00Z')),
      );
      expect({ name, errors: dciodvfy(sr) }).toEqual({ name, errors: [] });
      const tree = execFileSync('dsrdump', [sr], { encoding: 'utf8' });
      expect(tree).toMatch(/"Procedure reported"\)=\(AI-ANALYSIS,99IAA,"[^"]+"\)/);
    }
  });

  it('a filler number longer than a Requested Procedure ID (SH) takes: written empty, not cut into another one', () => {
    // `RIS-2026-000000012345` (21 characters) cut to 16 was `RIS-2026-0000000`: another
    // procedure's id, beside the accession the PACS reconciles on (IHE SWF).
    const input = publicationInput('DELIVERED', {});
    input.order = { ...input.order, fillerOrderNumber: 'RIS-2026-000000012345' };
    const sr = join(dir, 'sr-long-filler.dcm');
    writeFileSync(sr, buildMeasurementSr(input, sourceStudy(1), new Date('2026-11-24T10:00:00Z')));
    expect(dciodvfy(sr)).toEqual([]);
    const dump = execFileSync('dcmdump', ['+P', '0040,1001', '+P', '0040,2017', sr], {
      encoding: 'utf8',
    });
    expect(dump).not.toContain('RIS-2026-0000000]');
    expect(dump).toMatch(/\(0040,1001\) SH \(no value available\)/);
    expect(dump).toContain('(0040,2017) LO [RIS-2026-000000012345]');
  });

  it('a patient named only in the ideographic and phonetic groups keeps the name in the SR (UTF-8), valid', () => {
    const input = publicationInput('DELIVERED', {});
    const source = sourceStudy(1);
    source.attributes.patientName = '=山田^太郎=やまだ^たろう';
    const sr = join(dir, 'sr-ideographic.dcm');
    writeFileSync(sr, buildMeasurementSr(input, source, new Date('2026-11-24T10:00:00Z')));
    expect(dciodvfy(sr)).toEqual([]);
    const dump = execFileSync('dcmdump', ['+P', '0010,0010', sr], { encoding: 'utf8' });
    expect(dump).toContain('(0010,0010) PN [=山田^太郎=やまだ^たろう]');
  });

  it('non-Latin values longer than their VR in UTF-8 bytes: cut to the byte limit between characters, the SR and PDF still written and valid', () => {
    // 𠮷 (U+20BB7, outside the BMP) is written in the Japanese surname 𠮷野; a long kanji name
    // with its kana reading, a Korean referring physician, and a LOINC display in accented
    // Latin ending in an emoji. Before: dcmjs threw "Value exceeds max length" on the name
    // (no SR, no PDF), and dciodvfy refused 64 kanji (192 bytes) as longer than 64.
    const input = publicationInput('DELIVERED', {});
    input.order = {
      ...input.order,
      request: {
        ...input.order.request,
        procedure: { code: '24590-2', system: 'LN', display: `${'é'.repeat(63)}😀` },
      },
    };
    const source = sourceStudy(1);
    source.attributes.patientName = `${'𠮷野'.repeat(20)}^${'太郎'.repeat(20)}=${'やまだ'.repeat(30)}`;
    source.attributes.referringPhysicianName = `${'김'.repeat(40)}^민수`;
    source.attributes.studyDescription = '頭部MRI 造影 '.repeat(10);
    const now = new Date('2026-11-24T10:00:00Z');
    const sr = join(dir, 'sr-utf8-long.dcm');
    const pdf = join(dir, 'pdf-utf8-long.dcm');
    writeFileSync(sr, buildMeasurementSr(input, source, now));
    writeFileSync(pdf, buildEncapsulatedPdf(input, source, REPORT_PDF, now));
    expect({ sr: dciodvfy(sr), pdf: dciodvfy(pdf) }).toEqual({ sr: [], pdf: [] });
    const dump = execFileSync('dcmdump', ['+P', '0010,0010', '+P', '0008,0104', sr], {
      encoding: 'utf8',
    });
    const name = /\(0010,0010\) PN \[([^\]]*)\]/.exec(dump)?.[1] ?? '';
    expect(name.startsWith('𠮷野𠮷野')).toBe(true);
    expect(Buffer.byteLength(name)).toBeLessThanOrEqual(64);
    // No character is cut in half (a lone surrogate would be written as U+FFFD).
    expect(dump).not.toContain('\ufffd');
  });

  it('upstream texts of control characters only: no empty Text Value or Code Meaning (Type 1), the SR still valid', async () => {
    // A hostile or broken upstream result: a structure and an impression that are nothing but
    // control characters, a caveat of a NUL. Each survived parsing (not blank) and became an
    // empty Text Value once the control characters were removed.
    const results = parseResultContent(
      JSON.stringify({
        report_kind: 'results',
        findings: [{ structure: '\u0007\u0008', volume_ml: 4.2, flag: 'low' }],
        impression: '\u0001\u0002',
        caveat: '\u0000',
      }),
    );
    expect(results.findings).toHaveLength(1);
    const input = publicationInput('DELIVERED', { results });
    input.device = { ...input.device, version: '\u0000' };
    const sr = join(dir, 'sr-control-only.dcm');
    writeFileSync(sr, buildMeasurementSr(input, sourceStudy(1), new Date('2026-11-24T10:00:00Z')));
    expect(dciodvfy(sr)).toEqual([]);
    const dump = execFileSync('dcmdump', ['+P', '0040,a160', sr], { encoding: 'utf8' });
    // The impression and the caveat are left out; the mandatory texts say `unknown`.
    expect(dump).toContain('(0040,a160) UT [unknown]');
    expect(dump).not.toMatch(/\(0040,a160\) UT \(no value available\)/);
  });

  it('escape sequences and C1 control characters in study or result values: none is written into the ISO_IR 192 SR and PDF', () => {
    // ESC is allowed in string values only to switch character sets by ISO 2022 code
    // extensions, which ISO_IR 192 cannot use (PS3.3 C.12.1.1.2); C1 controls (U+0080-U+009F)
    // are control characters, which no string or text VR allows (PS3.5 Table 6.2-1). A study
    // of a Japanese modality read with the JIS escape sequences in its name (undeclared
    // character set), an upstream text with a terminal colour code, and a NEL (U+0085) from a
    // text copied out of an EBCDIC system. Before: all written as they were.
    const results = parseResultContent(
      JSON.stringify({
        report_kind: 'results',
        findings: [{ structure: 'Hippo\u0085campus', volume_ml: 4.2, flag: 'low' }],
        impression: 'Volume \u001b[31mlow\u001b[0m,\u009b within range',
      }),
    );
    const input = publicationInput('DELIVERED', { results });
    input.device = { ...input.device, name: 'Volumetry\u001b', version: '1.\u00850' };
    const source = sourceStudy(1);
    source.attributes.patientName = '\u001b$B;3ED\u001b(B^\u001b$BB@O:\u001b(B';
    source.attributes.studyDescription = 'MR\u0085 BRAIN\u009f';
    const now = new Date('2026-11-24T10:00:00Z');
    const sr = join(dir, 'sr-escapes.dcm');
    const pdf = join(dir, 'pdf-escapes.dcm');
    writeFileSync(sr, buildMeasurementSr(input, source, now));
    writeFileSync(pdf, buildEncapsulatedPdf(input, source, REPORT_PDF, now));
    expect({ sr: dciodvfy(sr), pdf: dciodvfy(pdf) }).toEqual({ sr: [], pdf: [] });
    for (const file of [sr, pdf]) {
      const dump = execFileSync('dcmdump', ['-q', file], { encoding: 'utf8' });
      // eslint-disable-next-line no-control-regex
      expect(dump.match(/[\u001b\u0080-\u009f]/g)).toBeNull();
    }
    const dump = execFileSync('dcmdump', ['+P', '0040,a160', '+P', '0008,1030', sr], {
      encoding: 'utf8',
    });
    expect(dump).toContain('[Volume [31mlow[0m, within range]');
    expect(dump).toContain('(0008,1030) LO [MR BRAIN]');
  });

  it('tabs in upstream texts and the device name (a tabulated impression): written as spaces, the SR and PDF valid', () => {
    // PS3.5 Table 6.2-1 lets ST, LT and UT hold CR, LF, FF and ESC, not TAB; a tab was kept
    // and dciodvfy refused the Text Value and the UDI ("Character invalid for this VR" 0x9).
    const input = publicationInput('DELIVERED', {});
    input.results = {
      ...input.results!,
      impression: 'Hippocampus\t3.1 mL\r\nVentricles\t24.0 mL',
      caveat: 'Motion\tartefact',
    };
    input.device = { ...input.device, name: 'brain\tvolumetry', udi: '(01)0085\t0012345678' };
    const now = new Date('2026-11-24T10:00:00Z');
    const sr = join(dir, 'sr-tabs.dcm');
    const pdf = join(dir, 'pdf-tabs.dcm');
    writeFileSync(sr, buildMeasurementSr(input, sourceStudy(1), now));
    writeFileSync(pdf, buildEncapsulatedPdf(input, sourceStudy(1), REPORT_PDF, now));
    expect({ sr: dciodvfy(sr), pdf: dciodvfy(pdf) }).toEqual({ sr: [], pdf: [] });
    const tree = execFileSync('dsrdump', ['+U8', sr], { encoding: 'utf8' });
    expect(tree).toContain('Hippocampus 3.1 mL');
    expect(tree).toContain('Motion artefact');
    expect(tree).toContain('brain volumetry');
  });

  it('a device UDI with nothing printable (a site mapping of spaces or a control character): no UDI Sequence, the SR and PDF valid', () => {
    // The UDI is Type 1 in its sequence: written as it came it was empty after the VR rules.
    const now = new Date('2026-11-24T10:00:00Z');
    for (const [n, udi] of ['   ', '\u0007', '\t\r\n'].entries()) {
      const input = publicationInput('DELIVERED', {});
      input.device = { ...input.device, udi };
      const sr = join(dir, `sr-udi-${n}.dcm`);
      const pdf = join(dir, `pdf-udi-${n}.dcm`);
      writeFileSync(sr, buildMeasurementSr(input, sourceStudy(1), now));
      writeFileSync(pdf, buildEncapsulatedPdf(input, sourceStudy(1), REPORT_PDF, now));
      expect({ sr: dciodvfy(sr), pdf: dciodvfy(pdf) }).toEqual({ sr: [], pdf: [] });
      const dump = execFileSync('dcmdump', ['+P', '0018,1000', '+P', '0018,100a', sr], {
        encoding: 'utf8',
      });
      expect(dump).not.toContain('(0018,100a)');
      expect(dump).toContain(`(0018,1000) LO [${input.device.uid}]`);
    }
  });

  it('a result without findings (an impression only): no empty Content Sequence, the SR valid', () => {
    // A product that reports only an impression, or a findings list the upstream left empty.
    const results = parseResultContent(
      JSON.stringify({ report_kind: 'results', findings: [], impression: 'No abnormality.' }),
    );
    const input = publicationInput('DELIVERED', { results });
    const sr = join(dir, 'sr-no-findings.dcm');
    writeFileSync(sr, buildMeasurementSr(input, sourceStudy(1), new Date('2026-11-24T10:00:00Z')));
    expect(dciodvfy(sr)).toEqual([]);
    const dump = execFileSync('dcmdump', ['+P', '0040,a160', sr], { encoding: 'utf8' });
    expect(dump).toContain('(0040,a160) UT [No abnormality.]');
  });

  it('a study with a presentation state, a key object selection, an SR and a PDF mixed in: only its images are in the Image Library, every instance in the evidence', () => {
    // As a PACS holds a reported study: the images, a GSPS, a KOS of key images, the
    // radiologist's SR and a scanned requisition PDF (PS3.4 Table B.5-1 classes).
    const source = sourceStudy(2);
    const others = [
      ['1.2.840.10008.5.1.4.1.1.11.1', '2.25.900001'],
      ['1.2.840.10008.5.1.4.1.1.88.59', '2.25.900002'],
      ['1.2.840.10008.5.1.4.1.1.88.22', '2.25.900003'],
      ['1.2.840.10008.5.1.4.1.1.104.1', '2.25.900004'],
    ] as const;
    for (const [sopClassUid, sopInstanceUid] of others)
      source.instances.push({ sopClassUid, sopInstanceUid, seriesInstanceUid: '2.25.900000' });
    const sr = join(dir, 'sr-mixed-study.dcm');
    writeFileSync(
      sr,
      buildMeasurementSr(
        publicationInput('DELIVERED', {}),
        source,
        new Date('2026-11-24T10:00:00Z'),
      ),
    );
    expect(dciodvfy(sr)).toEqual([]);
    const dump = execFileSync('dcmdump', [sr], { encoding: 'utf8' });
    expect(dump.match(/\(0040,a040\) CS \[IMAGE\]/g)).toHaveLength(2);
    for (const [, sopInstanceUid] of others) {
      // Named once: in the evidence, not as an IMAGE of the library.
      expect(dump.split(`[${sopInstanceUid}]`)).toHaveLength(2);
    }
  });

  it.each([
    ['letters', (uid: string) => `${uid}.A1`],
    ['a backslash', (uid: string) => `${uid}\\9`],
    ['an empty component', (uid: string) => uid.replace('.', '..')],
    ['more than 64 characters', (uid: string) => `${uid}.${'1'.repeat(64)}`],
  ])(
    'a source study or referenced instance UID with %s: no SR or PDF is built, never one under an altered UID',
    (_what, spoil) => {
      const now = new Date('2026-11-28T05:00:00Z');
      const input = publicationInput('DELIVERED', {});
      for (const [where, attribute] of [
        ['study', 'StudyInstanceUID'],
        ['series', 'SeriesInstanceUID'],
        ['instance', 'ReferencedSOPInstanceUID'],
      ] as const) {
        const source = sourceStudy(2);
        if (where === 'study')
          source.attributes.studyInstanceUid = spoil(source.attributes.studyInstanceUid);
        if (where === 'series')
          source.instances[1]!.seriesInstanceUid = spoil(source.instances[1]!.seriesInstanceUid);
        if (where === 'instance')
          source.instances[1]!.sopInstanceUid = spoil(source.instances[1]!.sopInstanceUid);
        expect(() => buildMeasurementSr(input, source, now)).toThrow(
          expect.objectContaining({ code: 'invalid_uid', detail: { attribute } }),
        );
        // the PDF names the study only
        if (where === 'study')
          expect(() => buildEncapsulatedPdf(input, source, REPORT_PDF, now)).toThrow(
            expect.objectContaining({ code: 'invalid_uid', detail: { attribute } }),
          );
      }
    },
  );

  it.each([
    ['PN', '山'.repeat(30), '山'.repeat(21)],
    ['LO', `${'é'.repeat(31)}ab`, `${'é'.repeat(31)}ab`],
    ['LO', `${'é'.repeat(32)}x`, 'é'.repeat(32)],
    ['SH', '😀😀😀😀😀', '😀😀😀😀'],
  ])('validForVr(%s) counts UTF-8 bytes: %s', (vr, input, expected) => {
    expect(validForVr(vr, input)).toBe(expected);
  });

  it.each([
    ['LO', 'a\\b\r\nc', 'a b c'],
    ['SH', 'X'.repeat(20), 'X'.repeat(16)],
    ['CS', 'in progress', 'IN PROGRESS'],
    ['ST', 'line 1\r\nline 2 \\ kept\u0000', 'line 1\r\nline 2 \\ kept'],
    // The whole value within 64 bytes: dciodvfy refused `A×64=C` (66).
    ['PN', `${'A'.repeat(70)}^B=C`, 'A'.repeat(64)],
    ['PN', `${'A'.repeat(60)}^B=C`, `${'A'.repeat(60)}^B=C`],
    ['UI', '1.2.3', '1.2.3'],
    ['DA', '2026-11-20', '20261120'],
    ['DA', '20261340', ''],
    // days the calendar does not have (a date-shifting anonymiser's 30 February): no date
    ['DA', '20260230', ''],
    ['DA', '1961.09.31', ''],
    ['DA', '21000229', ''],
    ['DA', '20240229', '20240229'],
    ['DA', '20000229', '20000229'],
    ['DA', 'unknown', ''],
    ['TM', '07:29', '0729'],
    ['TM', '101010.1234567', ''],
    ['TM', '25', ''],
    ['PN', 'A^B^C^D^E^F=G^H', 'A^B^C^D^E F=G^H'],
  ])('validForVr(%s)', (vr, input, expected) => {
    expect(validForVr(vr, input)).toBe(expected);
  });
});
