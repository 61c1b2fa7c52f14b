import { sanitizeDataset } from './dicom-vr';
import { OutboundError } from './outbound.error';

const vrOf = (keyword: string) => ({ AccessionNumber: 'SH', PatientID: 'LO' })[keyword];

describe('sanitizeDataset: identifiers', () => {
  it('writes an identifier padded with spaces as it is, and one that is not valid as it stands empty', () => {
    expect(sanitizeDataset({ AccessionNumber: ' ACC-42 ', PatientID: 'PAT-7' }, vrOf)).toEqual({
      AccessionNumber: 'ACC-42',
      PatientID: 'PAT-7',
    });
    // cut to 16 it would be another exam's number
    expect(sanitizeDataset({ AccessionNumber: 'ACC-2026-000000000042' }, vrOf)).toEqual({
      AccessionNumber: '',
    });
  });

  it('compares an identifier with long runs of spaces in linear time', () => {
    // `/^ +| +$/g` retried from every space of a run inside the value: 100,000 took 9 s of a
    // blocked event loop per attribute
    const started = performance.now();
    const out = sanitizeDataset(
      { PatientID: `P${' '.repeat(100_000)}Q${' '.repeat(100_000)}` },
      vrOf,
    );
    expect(out).toEqual({ PatientID: '' });
    expect(performance.now() - started).toBeLessThan(1_000);
  });
});

describe('sanitizeDataset: UIDs (PS3.5 §9.1)', () => {
  const uidVr = (keyword: string) =>
    ({ StudyInstanceUID: 'UI', ReferencedSOPInstanceUID: 'UI', ReferencedSOPSequence: 'SQ' })[
      keyword
    ];

  it.each([
    '1.2.840.10008.5.1.4.1.1.88.34',
    '2.25.236774193245113915118045127352190245331',
    '1.0.2',
    `1.${'2'.repeat(62)}`,
  ])('writes a valid UID as it is: %s', (uid) => {
    expect(sanitizeDataset({ StudyInstanceUID: uid }, uidVr)).toEqual({ StudyInstanceUID: uid });
  });

  it('writes a legacy UID with a leading zero component as it stands: it is the study’s own', () => {
    // older GE and Philips scanners: the PACS files the study under exactly this UID
    for (const uid of ['1.2.840.113619.2.55.3.0604688119.968.1196754235.0101', '1.2.840.0113619'])
      expect(sanitizeDataset({ StudyInstanceUID: uid }, uidVr)).toEqual({ StudyInstanceUID: uid });
  });

  it('takes the NUL padding off a UID (PS3.5 §6.2)', () => {
    expect(sanitizeDataset({ StudyInstanceUID: '1.2.3\0' }, uidVr)).toEqual({
      StudyInstanceUID: '1.2.3',
    });
  });

  it.each([
    ['letters', '1.2.840.ABC'],
    ['a backslash (a second value)', '1.2.3\\4.5'],
    ['an empty component', '1.2..3'],
    ['a trailing dot', '1.2.3.'],
    ['a space', '1.2.3 4'],
    ['a line break', '1.2.3\r\n4'],
    ['more than 64 characters', `1.${'2'.repeat(63)}`],
    ['nothing', ''],
  ])('refuses a UID with %s, never writes it altered', (_what, uid) => {
    for (const dataset of [
      { StudyInstanceUID: uid },
      { ReferencedSOPSequence: [{ ReferencedSOPInstanceUID: uid }] },
    ]) {
      let thrown: unknown;
      try {
        sanitizeDataset(dataset, uidVr);
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(OutboundError);
      expect(thrown).toMatchObject({
        code: 'invalid_uid',
        detail: {
          attribute:
            Object.keys(dataset)[0] === 'StudyInstanceUID'
              ? 'StudyInstanceUID'
              : 'ReferencedSOPInstanceUID',
        },
      });
      // the value stays out of the message
      if (uid) expect((thrown as Error).message).not.toContain(uid);
    }
  });
});
