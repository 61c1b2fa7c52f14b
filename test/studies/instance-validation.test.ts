import {
  closeSync,
  ftruncateSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkInstanceFile, FAILURE_REASON } from '../../src/studies/dicom-instance.validator';
import {
  createMrBrainSeries,
  IMPLICIT_VR_LITTLE_ENDIAN,
  MR_IMAGE_STORAGE,
  notDicomBytes,
  shortPixelData,
  truncatePixelData,
  writePart10,
} from '../helpers/dicom-factory';
import { element, rawInstance } from '../helpers/raw-dicom';

/** Instance validation on real Part 10 files written by dcmjs (test/helpers/dicom-factory). */
describe('checkInstanceFile', () => {
  let dir: string;
  let n = 0;
  const file = (bytes: Buffer) => {
    const path = join(dir, `${++n}.dcm`);
    writeFileSync(path, bytes);
    return path;
  };
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'studies-validate-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const [explicit] = createMrBrainSeries({
    study: { accessionNumber: 'VAL-1', studyDescription: 'MRI BRAIN' },
    series: { slices: 1, rows: 64, columns: 64 },
  });
  const [implicit] = createMrBrainSeries({
    series: { slices: 1, transferSyntaxUid: IMPLICIT_VR_LITTLE_ENDIAN },
  });

  it('accepts explicit and implicit VR little endian instances and reads the study attributes', async () => {
    const ok = await checkInstanceFile(file(explicit!.bytes));
    expect(ok).toEqual({
      ok: true,
      sizeBytes: explicit!.bytes.length,
      header: {
        sopClassUid: MR_IMAGE_STORAGE,
        sopInstanceUid: explicit!.sopInstanceUid,
        seriesInstanceUid: explicit!.seriesInstanceUid,
        studyInstanceUid: explicit!.studyInstanceUid,
        transferSyntaxUid: '1.2.840.10008.1.2.1',
        accessionNumber: 'VAL-1',
        patientId: 'SBX-000123',
        patientName: 'Sandbox^Patient',
        patientBirthDate: '19580412',
        patientSex: 'F',
        studyDate: '20260315',
        studyTime: '101500',
        studyId: '1',
        studyDescription: 'MRI BRAIN',
        referringPhysicianName: 'Referrer^Rita',
        modality: 'MR',
      },
    });
    expect(await checkInstanceFile(file(implicit!.bytes))).toMatchObject({
      ok: true,
      header: { transferSyntaxUid: IMPLICIT_VR_LITTLE_ENDIAN, modality: 'MR' },
    });
  });

  it('refuses truncated and short pixel data (8192 bytes needed for 64 × 64 × 16 bit)', async () => {
    expect(await checkInstanceFile(file(truncatePixelData(explicit!.bytes, 1000)))).toEqual({
      ok: false,
      failureReason: FAILURE_REASON.dataSetMismatch,
      reason: 'pixel data truncated: 8192 bytes declared, 1000 present',
      sopClassUid: MR_IMAGE_STORAGE,
      sopInstanceUid: explicit!.sopInstanceUid,
      studyInstanceUid: explicit!.studyInstanceUid,
    });
    expect(await checkInstanceFile(file(shortPixelData(explicit!.bytes, 4096)))).toMatchObject({
      ok: false,
      reason: 'pixel data incomplete: 4096 bytes, rows × columns × frames × samples needs 8192',
    });
    expect(await checkInstanceFile(file(truncatePixelData(implicit!.bytes, 10)))).toMatchObject({
      ok: false,
      failureReason: FAILURE_REASON.dataSetMismatch,
    });
  });

  it('refuses what is not DICOM, a cut header, missing UIDs and another study', async () => {
    expect(await checkInstanceFile(file(notDicomBytes()))).toEqual({
      ok: false,
      failureReason: FAILURE_REASON.cannotUnderstand,
      reason: 'not a DICOM Part 10 file (no DICM prefix)',
    });
    expect(await checkInstanceFile(file(Buffer.alloc(50)))).toMatchObject({
      ok: false,
      failureReason: FAILURE_REASON.cannotUnderstand,
    });
    expect(await checkInstanceFile(file(explicit!.bytes.subarray(0, 400)))).toMatchObject({
      ok: false,
      failureReason: FAILURE_REASON.cannotUnderstand,
    });
    const noSeries = writePart10({
      SOPClassUID: MR_IMAGE_STORAGE,
      SOPInstanceUID: '1.2.3.4.5',
      StudyInstanceUID: '1.2.3.4',
      Modality: 'MR',
    });
    expect(await checkInstanceFile(file(noSeries))).toMatchObject({
      ok: false,
      failureReason: FAILURE_REASON.dataSetMismatch,
      reason: 'missing or invalid Series Instance UID',
    });
    expect(
      await checkInstanceFile(file(explicit!.bytes), { expectedStudyUid: '1.2.3.999' }),
    ).toMatchObject({ ok: false, reason: 'the instance belongs to another study' });
  });

  it('reads further when the header before the pixel data is longer than the first read', async () => {
    // A long comment (and a vendor's long private data) push Pixel Data past the first 64 KiB.
    const [big] = createMrBrainSeries({ series: { slices: 1, rows: 16, columns: 16 } });
    const longText = 'x'.repeat(300 * 1024);
    const withComment = writePart10({
      SOPClassUID: MR_IMAGE_STORAGE,
      SOPInstanceUID: big!.sopInstanceUid,
      StudyInstanceUID: big!.studyInstanceUid,
      SeriesInstanceUID: big!.seriesInstanceUid,
      ImageComments: longText,
      Rows: 16,
      Columns: 16,
      BitsAllocated: 16,
      SamplesPerPixel: 1,
      PixelData: [new Uint16Array(256).buffer],
      _vrMap: { PixelData: 'OW' },
    });
    expect(withComment.length).toBeGreaterThan(300 * 1024);
    expect(await checkInstanceFile(file(withComment))).toMatchObject({ ok: true });
    expect(await checkInstanceFile(file(truncatePixelData(withComment, 100)))).toMatchObject({
      ok: false,
      reason: 'pixel data truncated: 512 bytes declared, 100 present',
    });
  });

  it('accepts uncompressed YBR_FULL_422 (two samples per pixel stored), refuses it short', async () => {
    // Modelled on pydicom's SC_ybr_full_422_uncompressed.dcm: 8-bit, 3 samples declared,
    // Y1 Y2 CB CR per pixel pair, so rows × columns × 2 bytes (PS3.3 C.7.6.3.1.2).
    const ybr = (pixelBytes: number) =>
      writePart10({
        SOPClassUID: '1.2.840.10008.5.1.4.1.1.7',
        SOPInstanceUID: '2.25.2001',
        StudyInstanceUID: '2.25.2002',
        SeriesInstanceUID: '2.25.2003',
        Modality: 'US',
        Rows: 16,
        Columns: 16,
        SamplesPerPixel: 3,
        PlanarConfiguration: 0,
        PhotometricInterpretation: 'YBR_FULL_422',
        BitsAllocated: 8,
        BitsStored: 8,
        HighBit: 7,
        PixelRepresentation: 0,
        PixelData: [new Uint8Array(pixelBytes).buffer],
        _vrMap: { PixelData: 'OB' },
      });
    expect(await checkInstanceFile(file(ybr(16 * 16 * 2)))).toMatchObject({ ok: true });
    expect(await checkInstanceFile(file(ybr(16 * 16)))).toMatchObject({
      ok: false,
      reason: 'pixel data incomplete: 256 bytes, rows × columns × frames × samples needs 512',
    });
  });

  it('accepts File Meta Information without its group length (0002,0000), refuses it cut short', async () => {
    // Modelled on pydicom's no_meta_group_length.dcm: the meta elements follow DICM directly.
    const raw = rawInstance({ accession: 'NOGL-1', patientId: 'PID-NOGL' });
    const noGroupLength = Buffer.concat([raw.bytes.subarray(0, 132), raw.bytes.subarray(144)]);
    expect(await checkInstanceFile(file(noGroupLength))).toMatchObject({
      ok: true,
      header: {
        sopInstanceUid: raw.sopInstanceUid,
        transferSyntaxUid: '1.2.840.10008.1.2.1',
        accessionNumber: 'NOGL-1',
        patientId: 'PID-NOGL',
      },
    });
    expect(await checkInstanceFile(file(noGroupLength.subarray(0, 150)))).toMatchObject({
      ok: false,
      failureReason: FAILURE_REASON.cannotUnderstand,
    });
  });

  it('reads the File Meta Information to its last element when the group length misses one', async () => {
    // A writer that counted the group length without its last element (Implementation
    // Version Name): with an implicit VR data set, that element was read as data and the
    // instance refused C000. DCMTK and pydicom read the meta group by its elements.
    const bytes = Buffer.from(implicit!.bytes);
    const metaEnd = 144 + bytes.readUInt32LE(140);
    let last = 144;
    for (let at = 144; at < metaEnd;) {
      last = at;
      const long = ['OB', 'UN', 'UT'].includes(bytes.toString('latin1', at + 4, at + 6));
      at += long ? 12 + bytes.readUInt32LE(at + 8) : 8 + bytes.readUInt16LE(at + 6);
    }
    expect(last).toBeGreaterThan(144);
    bytes.writeUInt32LE(last - 144, 140);
    expect(await checkInstanceFile(file(bytes))).toMatchObject({
      ok: true,
      header: {
        sopInstanceUid: implicit!.sopInstanceUid,
        transferSyntaxUid: IMPLICIT_VR_LITTLE_ENDIAN,
      },
    });
  });

  it.each([
    ['JPIP Referenced', '1.2.840.10008.1.2.4.94'],
    ['JPIP Referenced Deflate', '1.2.840.10008.1.2.4.95'],
    ['JPIP HTJ2K Referenced', '1.2.840.10008.1.2.4.204'],
    ['JPIP HTJ2K Referenced Deflate', '1.2.840.10008.1.2.4.205'],
  ])(
    'refuses an image in %s: its pixels are on a JPIP server, not in the file (C122)',
    async (_, ts) => {
      // PS3.5 §A.6: the data set carries Pixel Data Provider URL (0028,7FE0) instead of Pixel
      // Data. Taken as a file without pixel data (as an SR is), an MR image went upstream with
      // no pixels to analyse.
      const jpip = writePart10(
        {
          SOPClassUID: MR_IMAGE_STORAGE,
          SOPInstanceUID: '2.25.2001',
          StudyInstanceUID: '2.25.2002',
          SeriesInstanceUID: '2.25.2003',
          Modality: 'MR',
          Rows: 64,
          Columns: 64,
          BitsAllocated: 16,
          PixelDataProviderURL: 'http://jpip.example/image/2.25.2001',
        },
        ts,
      );
      expect(await checkInstanceFile(file(jpip))).toMatchObject({
        ok: false,
        failureReason: FAILURE_REASON.transferSyntaxNotSupported,
      });
    },
  );

  it('reads the Issuer of Accession Number Sequence (0008,0051) in every length form, its first item only', async () => {
    const ns = element(0x0040, 0x0031, 'UT', 'RIS_A');
    const uid = element(0x0040, 0x0032, 'UT', '1.2.826.0.1.3680043.10.42');
    const type = element(0x0040, 0x0033, 'CS', 'ISO');
    const u32 = (n: number) => {
      const b = Buffer.alloc(4);
      b.writeUInt32LE(n);
      return b;
    };
    const tag = (g: number, e: number) => Buffer.from([g & 0xff, g >> 8, e & 0xff, e >> 8]);
    const UNDEFINED = 0xffffffff;
    const item = (content: Buffer, defined: boolean) =>
      Buffer.concat([
        tag(0xfffe, 0xe000),
        u32(defined ? content.length : UNDEFINED),
        content,
        ...(defined ? [] : [tag(0xfffe, 0xe00d), u32(0)]),
      ]);
    const sequence = (items: Buffer, defined: boolean) =>
      Buffer.concat([
        tag(0x0008, 0x0051),
        Buffer.from('SQ\0\0', 'latin1'),
        u32(defined ? items.length : UNDEFINED),
        items,
        ...(defined ? [] : [tag(0xfffe, 0xe0dd), u32(0)]),
      ]);
    const other = item(element(0x0040, 0x0031, 'UT', 'RIS_B'), true);
    for (const [seqDefined, itemDefined] of [
      [false, false],
      [false, true],
      [true, false],
      [true, true],
    ] as const) {
      const seq = sequence(
        Buffer.concat([item(Buffer.concat([ns, uid, type]), itemDefined), other]),
        seqDefined,
      );
      const inst = rawInstance({ accession: 'ISS-1', patientId: 'P-ISS', beforePatient: seq });
      expect(await checkInstanceFile(file(inst.bytes))).toMatchObject({
        ok: true,
        header: {
          accessionNumber: 'ISS-1',
          issuerOfAccessionNumber: {
            namespace: 'RIS_A',
            universalId: '1.2.826.0.1.3680043.10.42',
            universalIdType: 'ISO',
          },
        },
      });
    }
    // an empty sequence names no issuer
    const empty = rawInstance({
      accession: 'ISS-2',
      beforePatient: sequence(Buffer.alloc(0), true),
    });
    const check = await checkInstanceFile(file(empty.bytes));
    expect(check.ok && check.header.issuerOfAccessionNumber).toBeUndefined();
  });

  it('accepts an instance without pixel data (e.g. a structured report)', async () => {
    const sr = writePart10({
      SOPClassUID: '1.2.840.10008.5.1.4.1.1.88.33',
      SOPInstanceUID: '2.25.1001',
      StudyInstanceUID: '2.25.1002',
      SeriesInstanceUID: '2.25.1003',
      Modality: 'SR',
    });
    expect(await checkInstanceFile(file(sr))).toMatchObject({
      ok: true,
      header: { modality: 'SR', sopClassUid: '1.2.840.10008.5.1.4.1.1.88.33' },
    });
  });

  it.each([
    ['JPEG baseline (dcmcjpeg)', 'dcmcjpeg', '1.2.840.10008.1.2.4.70'],
    ['JPEG-LS (dcmcjpls)', 'dcmcjpls', '1.2.840.10008.1.2.4.80'],
    ['RLE (dcmcrle)', 'dcmcrle', '1.2.840.10008.1.2.5'],
  ])(
    'refuses %s encapsulated pixel data cut short, takes it whole',
    async (_label, tool, syntax) => {
      // DCMTK compresses the MR slice (a Basic Offset Table item, one fragment, the sequence
      // delimiter), as a modality or router does; the copies cut short are what a sender
      // forwards from a file still being written. Before, only native pixel data was
      // checked: all three cut copies were taken (and uploaded) as valid.
      const [mr] = createMrBrainSeries({ series: { slices: 1, rows: 128, columns: 128 } });
      const source = file(mr!.bytes);
      const compressed = `${source}.${tool}`;
      execFileSync(tool, [source, compressed]);
      const bytes = readFileSync(compressed);
      expect(await checkInstanceFile(compressed)).toMatchObject({
        ok: true,
        header: { transferSyntaxUid: syntax },
      });
      // No sequence delimiter: dcmdump says "Sequence Delimitation Item missing" too.
      expect(await checkInstanceFile(file(bytes.subarray(0, bytes.length - 8)))).toMatchObject({
        ok: false,
        failureReason: FAILURE_REASON.dataSetMismatch,
        reason: 'encapsulated pixel data cut short: no sequence delimiter',
        sopInstanceUid: mr!.sopInstanceUid,
      });
      expect(await checkInstanceFile(file(bytes.subarray(0, bytes.length - 200)))).toMatchObject({
        ok: false,
        failureReason: FAILURE_REASON.dataSetMismatch,
        reason: expect.stringMatching(
          /^pixel data truncated: encapsulated item 2 declares \d+ bytes, \d+ present$/,
        ),
      });
      // Not items at all after the Pixel Data header.
      const garbage = Buffer.from(bytes);
      garbage.writeUInt32LE(0x12345678, bytes.length - 8);
      expect(await checkInstanceFile(file(garbage))).toMatchObject({
        ok: false,
        failureReason: FAILURE_REASON.dataSetMismatch,
        reason: 'encapsulated pixel data: item 3 is not a fragment of defined length',
      });
    },
  );

  it('refuses an attribute it reads that is longer than its VR can hold (a 32 MiB Patient ID), without decoding it', async () => {
    // Written with a 32-bit length (UN here, as implicit VR allows for any element): 32 MiB of
    // backslashes were split into 32 million values, 4.3 s of a blocked event loop and
    // +745 MiB, and the instance was taken with a 32 MiB Patient ID for the database row.
    const inst = rawInstance({ patientId: 'QQPID1' });
    const small = element(0x0010, 0x0020, 'LO', 'QQPID1');
    const at = inst.bytes.indexOf(small);
    const big = element(0x0010, 0x0020, 'UN', Buffer.alloc(32 * 1024 * 1024, 0x5c));
    const hostile = Buffer.concat([
      inst.bytes.subarray(0, at),
      big,
      inst.bytes.subarray(at + small.length),
    ]);
    expect(await checkInstanceFile(file(hostile))).toMatchObject({
      ok: false,
      failureReason: FAILURE_REASON.cannotUnderstand,
      reason: 'attribute (0010,0020) is 33554432 bytes long, more than its VR LO can hold (65534)',
    });
    // 65,534 bytes, the most an explicit VR LO holds, is still read
    const most = element(0x0010, 0x0020, 'UN', Buffer.alloc(65_534, 0x41));
    expect(
      await checkInstanceFile(
        file(
          Buffer.concat([inst.bytes.subarray(0, at), most, inst.bytes.subarray(at + small.length)]),
        ),
      ),
    ).toMatchObject({ ok: true, header: { patientId: 'A'.repeat(65_534) } });
  });

  it('refuses a data set that holds an identifier twice, whichever value would be read', async () => {
    // A router that appended a corrected Accession Number instead of replacing it: DCMTK reads
    // the first ("found twice … ignoring second entry"), pydicom the last, so the identity
    // checked here and the one the upstream reads could differ. Before: the last was taken.
    const twice = rawInstance({
      accession: 'DUP-ORDER-1',
      patientId: 'PID-DUP',
      beforePatient: element(0x0008, 0x0050, 'SH', 'DUP-OTHER-2'),
    });
    const path = file(twice.bytes);
    expect(await checkInstanceFile(path)).toEqual({
      ok: false,
      failureReason: FAILURE_REASON.cannotUnderstand,
      reason: 'the data set cannot be parsed (attribute (0008,0050) appears twice)',
    });
    const dump = execFileSync('dcmdump', ['+P', '0008,0050', path], {
      encoding: 'latin1',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    expect(dump).toMatch(/\[DUP-ORDER-1\]/);
  });

  describe('values larger than 64 MiB before (or instead of) the pixel data', () => {
    const MiB = 1024 * 1024;
    const us = (n: number) => Buffer.from([n & 0xff, n >> 8]);
    /** The header of an element of a long VR, its value `length` bytes (explicit VR LE). */
    const longHeader = (group: number, elem: number, vr: string, length: number) => {
      const h = Buffer.alloc(12);
      h.writeUInt16LE(group, 0);
      h.writeUInt16LE(elem, 2);
      h.write(vr, 4, 'latin1');
      h.writeUInt32LE(length, 8);
      return h;
    };
    /**
     * A Part 10 file: `head` (meta and data set), then the header of one large last element
     * whose value is `present` zero bytes (a sparse file: nothing is written for them).
     */
    const withLargeTail = (head: Buffer, tail: Buffer, present: number) => {
      const path = join(dir, `${++n}.dcm`);
      const fd = openSync(path, 'w');
      writeSync(fd, Buffer.concat([head, tail]));
      ftruncateSync(fd, head.length + tail.length + present);
      closeSync(fd);
      return path;
    };
    const part10 = (sopClass: string, sop: string, dataset: Buffer[]) => {
      const meta = Buffer.concat([
        element(0x0002, 0x0001, 'OB', Buffer.from([0, 1])),
        element(0x0002, 0x0002, 'UI', sopClass),
        element(0x0002, 0x0003, 'UI', sop),
        element(0x0002, 0x0010, 'UI', '1.2.840.10008.1.2.1'),
        element(0x0002, 0x0012, 'UI', '1.2.276.0.7230010.3.0.3.6.7'),
      ]);
      const groupLength = Buffer.alloc(4);
      groupLength.writeUInt32LE(meta.length);
      return Buffer.concat([
        Buffer.alloc(128),
        Buffer.from('DICM'),
        element(0x0002, 0x0000, 'UL', groupLength),
        meta,
        ...dataset,
      ]);
    };
    const identity = (sopClass: string, sop: string, modality: string) => [
      element(0x0008, 0x0016, 'UI', sopClass),
      element(0x0008, 0x0018, 'UI', sop),
      element(0x0008, 0x0050, 'SH', 'BIG-0042'),
      element(0x0008, 0x0060, 'CS', modality),
      element(0x0010, 0x0020, 'LO', 'PID-BIG'),
      element(0x0020, 0x000d, 'UI', '2.25.3001'),
      element(0x0020, 0x000e, 'UI', '2.25.3002'),
    ];

    it('steps over an encapsulated STL model and a vendor raw data element it never reads', async () => {
      // Encapsulated STL (PS3.3 A.85): a 3D-printing model of a CT, 70 MiB in (0042,0011),
      // with no Pixel Data. Before: read whole up to 64 MiB, then refused A700 ("header
      // larger than 64 MiB before the pixel data"), and a pulled study holding it failed.
      const STL = '1.2.840.10008.5.1.4.1.1.104.3';
      const stl = withLargeTail(
        part10(STL, '2.25.3003', [
          ...identity(STL, '2.25.3003', 'M3D'),
          element(0x0042, 0x0012, 'LO', 'model/stl'),
        ]),
        longHeader(0x0042, 0x0011, 'OB', 70 * MiB),
        70 * MiB,
      );
      expect(await checkInstanceFile(stl)).toMatchObject({
        ok: true,
        header: { sopClassUid: STL, accessionNumber: 'BIG-0042', patientId: 'PID-BIG' },
      });
      // Raw Data Storage as a PET/CT console writes list-mode data: a private creator in
      // (7FE1,0010) and the data in (7FE1,1010) OB, after where Pixel Data would be.
      const RAW = '1.2.840.10008.5.1.4.1.1.66';
      const raw = withLargeTail(
        part10(RAW, '2.25.3004', [
          ...identity(RAW, '2.25.3004', 'PT'),
          element(0x7fe1, 0x0010, 'LO', 'SIEMENS MI RAW DATA'),
        ]),
        longHeader(0x7fe1, 0x1010, 'OB', 80 * MiB),
        80 * MiB,
      );
      expect(await checkInstanceFile(raw)).toMatchObject({ ok: true, header: { modality: 'PT' } });
      // A second Patient ID after the large value is seen too, in the window read after it.
      const path = withLargeTail(
        part10(RAW, '2.25.3007', [...identity(RAW, '2.25.3007', 'PT')]),
        longHeader(0x0019, 0x1010, 'OB', 80 * MiB),
        80 * MiB,
      );
      const fd = openSync(path, 'a');
      writeSync(fd, element(0x0010, 0x0020, 'LO', 'PID-OTHER'));
      closeSync(fd);
      expect(await checkInstanceFile(path)).toMatchObject({
        ok: false,
        reason: 'the data set cannot be parsed (attribute (0010,0020) appears twice)',
      });
      // Cut short inside the large value: still a file that is not whole.
      const cut = withLargeTail(
        part10(RAW, '2.25.3005', [...identity(RAW, '2.25.3005', 'PT')]),
        longHeader(0x7fe1, 0x1010, 'OB', 80 * MiB),
        79 * MiB,
      );
      expect(await checkInstanceFile(cut)).toEqual({
        ok: false,
        failureReason: FAILURE_REASON.cannotUnderstand,
        reason:
          'the data set cannot be parsed (an element is longer than the bytes that follow it)',
      });
    });

    it('checks Float Pixel Data (7FE0,0008) of a parametric map like native pixel data', async () => {
      // Modelled on pydicom's parametric_map_float.dcm (Parametric Map Storage, 32-bit float
      // pixels in (7FE0,0008) OF), scaled to 70 frames of 512 × 512: 70 MiB. Before: refused
      // A700 past 64 MiB, and a short one C000 "cannot be parsed" instead of "truncated".
      const MAP = '1.2.840.10008.5.1.4.1.1.30';
      const map = (frames: number) =>
        part10(MAP, '2.25.3006', [
          ...identity(MAP, '2.25.3006', 'MR'),
          element(0x0028, 0x0002, 'US', us(1)),
          element(0x0028, 0x0004, 'CS', 'MONOCHROME2'),
          element(0x0028, 0x0008, 'IS', String(frames)),
          element(0x0028, 0x0010, 'US', us(512)),
          element(0x0028, 0x0011, 'US', us(512)),
          element(0x0028, 0x0100, 'US', us(32)),
        ]);
      const pixels = longHeader(0x7fe0, 0x0008, 'OF', 70 * MiB);
      expect(await checkInstanceFile(withLargeTail(map(70), pixels, 70 * MiB))).toMatchObject({
        ok: true,
        header: { sopClassUid: MAP },
      });
      expect(await checkInstanceFile(withLargeTail(map(70), pixels, 3 * MiB))).toMatchObject({
        ok: false,
        failureReason: FAILURE_REASON.dataSetMismatch,
        reason: `pixel data truncated: ${70 * MiB} bytes declared, ${3 * MiB} present`,
      });
      // 71 frames declared, 70 frames of floats present: incomplete, as native pixel data.
      expect(await checkInstanceFile(withLargeTail(map(71), pixels, 70 * MiB))).toMatchObject({
        ok: false,
        failureReason: FAILURE_REASON.dataSetMismatch,
        reason: `pixel data incomplete: ${70 * MiB} bytes, rows × columns × frames × samples needs ${71 * MiB}`,
      });
    });
  });
});
