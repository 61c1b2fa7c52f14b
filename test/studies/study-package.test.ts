import { execFile } from 'node:child_process';
import { createWriteStream, mkdtempSync, rmSync } from 'node:fs';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import {
  entryNameOf,
  safeSegment,
  writeStudyPackage,
} from '../../src/studies/study-package.writer';
import { createMrBrainSeries, createMrBrainStudy, generateUid } from '../helpers/dicom-factory';
import { readZip, sha256 } from './study-test-support';
import { writeFileSync } from 'node:fs';

const run = promisify(execFile);

describe('study package (ZIP streamed from staged files)', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'studies-pkg-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('holds every instance unchanged under a safe name, plus the JSON sidecar', async () => {
    const study = createMrBrainStudy({
      series: [
        { slices: 2, seriesDescription: 'T1' },
        { slices: 1, seriesDescription: 'FLAIR' },
      ],
    });
    const entries = study.map((inst, i) => {
      const path = join(dir, `staged-${i}.dcm`);
      writeFileSync(path, inst.bytes);
      return {
        path,
        seriesInstanceUid: inst.seriesInstanceUid,
        sopInstanceUid: inst.sopInstanceUid,
      };
    });
    const sidecar = { order_id: 'abc', products: ['brain-volumetry'], note: 'ünïcode' };
    const result = await writeStudyPackage(join(dir, 'packages', 'o1.zip'), entries, sidecar);
    const zip = await readZip(result.path);
    expect([...zip.keys()].sort()).toEqual(
      [
        ...study.map((i) => `DICOM/${i.seriesInstanceUid}/${i.sopInstanceUid}.dcm`),
        'metadata.json',
      ].sort(),
    );
    for (const inst of study) {
      expect(sha256(zip.get(`DICOM/${inst.seriesInstanceUid}/${inst.sopInstanceUid}.dcm`)!)).toBe(
        sha256(inst.bytes),
      );
    }
    expect(JSON.parse(zip.get('metadata.json')!.toString('utf8'))).toEqual(sidecar);
    expect(result.entryNames).toHaveLength(4);

    // Without a sidecar, there is no metadata.json.
    const bare = await readZip((await writeStudyPackage(join(dir, 'o2.zip'), entries)).path);
    expect(bare.has('metadata.json')).toBe(false);
  });

  it('never produces an entry name that escapes the archive', () => {
    for (const evil of ['..', '.', '../../etc/passwd', '/abs/path', 'C:\\win\\x', 'a/../b', '']) {
      const name = entryNameOf({ seriesInstanceUid: evil, sopInstanceUid: evil });
      const segments = name.split('/');
      expect(segments[0]).toBe('DICOM');
      expect(segments).toHaveLength(3);
      for (const s of segments) expect(s === '.' || s === '..' || s === '').toBe(false);
      expect(name).not.toMatch(/\\|^\//);
    }
    expect(safeSegment('1.2.840.10008')).toBe('1.2.840.10008');
  });

  it('keeps memory flat while receiving, validating and packaging a 200 MB study (child process)', async () => {
    // 100 instances of 1024 × 1024 × 16 bit (2 MiB each) in one multipart body on disk,
    // generated one instance at a time so this process never holds the study either.
    const boundary = 'memprobe-boundary-7f3a';
    const bodyFile = join(dir, 'stow-body.bin');
    const out = createWriteStream(bodyFile);
    const studyInstanceUid = generateUid();
    const seriesInstanceUid = generateUid();
    const write = async (b: Buffer) => {
      if (!out.write(b)) await once(out, 'drain');
    };
    // One real instance is generated; the others are copies with their own SOP Instance UID
    // (same length, patched where it occurs in the meta header and the data set).
    const [template] = createMrBrainSeries({
      study: { studyInstanceUid },
      series: { seriesInstanceUid, slices: 1, rows: 1024, columns: 1024 },
    });
    const templateUid = Buffer.from(template!.sopInstanceUid);
    for (let i = 0; i < 100; i++) {
      const bytes = Buffer.from(template!.bytes);
      const uid = Buffer.from(
        `${template!.sopInstanceUid.slice(0, -4)}${String(1000 + i).slice(-4)}`,
      );
      for (let at = bytes.indexOf(templateUid); at >= 0; at = bytes.indexOf(templateUid, at + 1))
        uid.copy(bytes, at);
      await write(Buffer.from(`--${boundary}\r\nContent-Type: application/dicom\r\n\r\n`));
      await write(bytes);
      await write(Buffer.from('\r\n'));
    }
    await write(Buffer.from(`--${boundary}--\r\n`));
    out.end();
    await once(out, 'close');

    const { stdout } = await run(
      process.execPath,
      [
        '--expose-gc',
        '-r',
        '@swc-node/register',
        join(__dirname, 'memory-probe.script.ts'),
        bodyFile,
        boundary,
        join(dir, 'probe'),
      ],
      { cwd: join(__dirname, '..', '..'), maxBuffer: 1024 * 1024 },
    );
    const probe = JSON.parse(stdout.trim().split('\n').pop()!) as {
      baselineRss: number;
      peakRss: number;
      instances: number;
      uniqueInstances: number;
      zipBytes: number;
      seconds: number;
    };
    expect(probe.instances).toBe(100);
    expect(probe.uniqueInstances).toBe(100);
    expect(probe.zipBytes).toBeGreaterThan(200 * 1024 * 1024);
    // The study is 200 MiB; streaming keeps the process within a fixed margin well below it
    // (buffering the study would add at least its size).
    const growthMiB = (probe.peakRss - probe.baselineRss) / (1024 * 1024);
    console.log(`memory probe: +${growthMiB.toFixed(1)} MiB RSS, ${probe.seconds} s`);
    expect(growthMiB).toBeLessThan(96);
  }, 120_000);
});
