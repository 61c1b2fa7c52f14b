import {
  IMPLICIT_VR_LITTLE_ENDIAN,
  createMrBrainSeries,
  createMrBrainStudy,
  deterministicUid,
  generateUid,
  shortPixelData,
  truncatePixelData,
} from '../helpers/dicom-factory';
import { newOrder, startHarness, statusOf, uploadSingle, type Harness } from './sandbox-test-kit';
import { zipStudy } from '../helpers/dicom-factory';

// dcmjs has no type declarations; read back with the subset used here.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const dcmjs = require('dcmjs') as {
  data: {
    DicomMessage: {
      readFile(b: ArrayBuffer): { meta: Record<string, unknown>; dict: Record<string, unknown> };
    };
    DicomMetaDictionary: { naturalizeDataset(d: Record<string, unknown>): Record<string, unknown> };
  };
};

// Implicit VR files make dcmjs log the dictionary's "ox" (OB or OW) VR of Pixel Data; expected.
(
  dcmjs as unknown as { log?: { getLogger?: (n: string) => { setLevel?: (l: string) => void } } }
).log
  ?.getLogger?.('validation.dcmjs')
  .setLevel?.('silent');

function read(bytes: Buffer): { meta: Record<string, unknown>; ds: Record<string, unknown> } {
  const parsed = dcmjs.data.DicomMessage.readFile(
    bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length) as ArrayBuffer,
  );
  return {
    meta: dcmjs.data.DicomMetaDictionary.naturalizeDataset(parsed.meta),
    ds: dcmjs.data.DicomMetaDictionary.naturalizeDataset(parsed.dict),
  };
}

describe('test/helpers/dicom-factory', () => {
  it('writes Part 10 MR files whose attributes and 16-bit pixel data read back', () => {
    const series = createMrBrainSeries({
      patient: { patientId: 'P-77', patientName: 'Doe^Jane', birthDate: '19800229', sex: 'F' },
      study: { accessionNumber: 'ACC-77', studyDescription: 'MR BRAIN' },
      series: { slices: 3, rows: 16, columns: 24 },
    });
    expect(series).toHaveLength(3);
    const { meta, ds } = read(series[1].bytes);
    expect(series[1].bytes.toString('latin1', 128, 132)).toBe('DICM');
    expect(meta.TransferSyntaxUID).toBe('1.2.840.10008.1.2.1');
    expect(ds).toMatchObject({
      PatientID: 'P-77',
      AccessionNumber: 'ACC-77',
      Modality: 'MR',
      Rows: 16,
      Columns: 24,
      BitsAllocated: 16,
      InstanceNumber: 2,
    });
    expect(ds.StudyInstanceUID).toBe(series[0].studyInstanceUid);
    expect(ds.SeriesInstanceUID).toBe(series[0].seriesInstanceUid);
    expect(ds.SOPInstanceUID).toBe(series[1].sopInstanceUid);
    const pixels = (ds.PixelData as ArrayBuffer[])[0];
    expect(pixels.byteLength).toBe(16 * 24 * 2);
    const values = new Uint16Array(pixels);
    expect(Math.max(...values)).toBeLessThan(4096);
    expect(new Set(values).size).toBeGreaterThan(10);
  });

  it('writes implicit VR little endian on request, which the sandbox accepts', async () => {
    const [instance] = createMrBrainSeries({
      series: { slices: 1, transferSyntaxUid: IMPLICIT_VR_LITTLE_ENDIAN },
    });
    expect(read(instance.bytes).meta.TransferSyntaxUID).toBe(IMPLICIT_VR_LITTLE_ENDIAN);
    const h: Harness = await startHarness();
    try {
      const id = await newOrder(h);
      await uploadSingle(h, id, instance.bytes);
      expect(await statusOf(h, id)).toBe('RECEIVED');
    } finally {
      await h.close();
    }
  });

  it('builds multi-series studies sharing one Study Instance UID', async () => {
    const study = createMrBrainStudy({
      series: [{ slices: 2 }, { slices: 3, seriesDescription: 'AX FLAIR' }],
    });
    expect(study).toHaveLength(5);
    expect(new Set(study.map((i) => i.studyInstanceUid)).size).toBe(1);
    expect(new Set(study.map((i) => i.seriesInstanceUid)).size).toBe(2);
    const h: Harness = await startHarness();
    try {
      const id = await newOrder(h, { sandbox_outcome: 'qc_failed' });
      await uploadSingle(h, id, await zipStudy(study));
      await h.sandbox.advance(60_000);
      const info = await h.call('GET', '/qc-report', {
        token: await h.token(),
        query: { order_id: id, report_type: 'additional_info' },
      });
      expect(info.json.acquisition).toMatchObject({
        series_count: 2,
        instance_count: 5,
        series_descriptions: ['T1 MPRAGE SAG 1mm', 'AX FLAIR'],
      });
    } finally {
      await h.close();
    }
  });

  it.each([
    ['Latin-1 letters', 'Müller^Jürgen', 'Klinik Süd', 'ISO_IR 192', 'utf8'],
    ['letters outside Latin-1', 'Иванов^Иван', 'Больница', 'ISO_IR 192', 'utf8'],
    ['ASCII only', 'Doe^Jane', 'Sandbox Imaging Center', 'ISO_IR 100', 'latin1'],
  ] as const)(
    'writes the text bytes its Specific Character Set names (%s)',
    (_what, patientName, institutionName, charset, encoding) => {
      // Before: ISO_IR 100 declared over dcmjs's UTF-8 bytes, so `Müller` was `MÃ¼ller` to any
      // reader that honours (0008,0005), and a test of it passed for the wrong reason.
      const [instance] = createMrBrainSeries({
        patient: { patientId: 'P-CS', patientName },
        study: { institutionName },
        series: { slices: 1 },
      });
      // (0008,0005) as written (dcmjs's reader reports ISO_IR 192 for whatever it decoded)
      const bytes = instance!.bytes;
      const at = bytes.indexOf(Buffer.from('\x08\x00\x05\x00CS', 'latin1'));
      const declared = bytes.toString('latin1', at + 8, at + 8 + bytes.readUInt16LE(at + 6));
      expect(declared.trim()).toBe(charset);
      for (const text of [patientName, institutionName]) {
        expect(bytes.includes(Buffer.from(text, encoding))).toBe(true);
      }
    },
  );

  it('makes UIDs that are valid (≤ 64 characters, 2.25 root) and, when seeded, stable', () => {
    for (const uid of [generateUid(), deterministicUid('x')]) {
      expect(uid).toMatch(/^2\.25\.(0|[1-9]\d*)$/);
      expect(uid.length).toBeLessThanOrEqual(64);
    }
    expect(deterministicUid('seed')).toBe(deterministicUid('seed'));
    expect(generateUid()).not.toBe(generateUid());
  });

  it('cuts pixel data short in the two ways a broken sender does', () => {
    const [instance] = createMrBrainSeries({ series: { slices: 1, rows: 8, columns: 8 } });
    expect(truncatePixelData(instance.bytes, 10).length).toBe(instance.bytes.length - 128 + 10);
    const short = shortPixelData(instance.bytes, 10);
    const at = short.indexOf(Buffer.from([0xe0, 0x7f, 0x10, 0x00]), 132);
    expect(short.readUInt32LE(at + 8)).toBe(10);
  });
});
