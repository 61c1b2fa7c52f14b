import type { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import * as yauzl from 'yauzl';
import { LIMITS } from '../imaging-spec/imaging-spec';
import { HEADER_PREFIX_BYTES, MAX_HEADER_PREFIX_BYTES, inspectDicom } from './dicom-header';
import { metadataFromSidecar, type Metadata } from './metadata-rules';
import { SandboxError, invalidStudy, type FileProblem } from './sandbox.error';
import { DicomCollector, summarize, type StudyIntake } from './study-summary';

// A ZIP upload: entry paths, sizes and expansion checked before anything is inflated, then
// each DICOM header, NIfTI-1 header, b-value/b-vector pair and JSON sidecar read.

/** A zip entry inflating more than this many times its stored size is refused as a zip bomb. */
export const MAX_EXPANSION_RATIO = 100;
/** …but only once it is big enough to matter (small, very regular files compress well legitimately). */
const RATIO_CHECK_MIN_BYTES = 10 * 1024 * 1024;
const MAX_ZIP_ENTRIES = 100_000;
const MAX_TEXT_ENTRY_BYTES = 1024 * 1024;

/** Reads at most `max` bytes of a stream, then stops it. */
function readStreamPrefix(stream: Readable, max: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let total = 0;
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      stream.removeAllListeners('data');
      stream.destroy();
      const all = Buffer.concat(chunks);
      resolve(all.subarray(0, Math.min(max, all.length)));
    };
    stream.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      total += chunk.length;
      if (total >= max) finish();
    });
    stream.on('end', finish);
    stream.on('error', (err) => {
      if (!done) {
        done = true;
        reject(err);
      }
    });
  });
}

/** Entry names that may sit in a study archive without being part of the study. */
function ignorable(name: string): boolean {
  const base = name.split('/').pop() ?? name;
  return (
    name.startsWith('__MACOSX/') ||
    base.startsWith('.') ||
    base.toUpperCase() === 'DICOMDIR' ||
    /\.(txt|md|html?)$/i.test(base)
  );
}

function unsafePath(name: string): string | null {
  if (name.includes('\\')) return 'entry path contains a backslash';
  if (name.startsWith('/') || /^[A-Za-z]:/.test(name)) return 'entry path is absolute';
  if (name.split('/').some((seg) => seg === '..'))
    return 'entry path climbs out of the archive ("../")';
  if (name.includes('\0')) return 'entry path contains a NUL byte';
  return null;
}

interface OpenedZip {
  zip: yauzl.ZipFile;
  entries: yauzl.Entry[];
}

function openZip(path: string): Promise<OpenedZip> {
  return new Promise((resolve, reject) => {
    yauzl.open(
      path,
      { lazyEntries: true, decodeStrings: false, validateEntrySizes: true, autoClose: false },
      (err, zip) => {
        if (err || !zip) return reject(err ?? new Error('cannot open'));
        const entries: yauzl.Entry[] = [];
        zip.on('entry', (e: yauzl.Entry) => {
          entries.push(e);
          if (entries.length > MAX_ZIP_ENTRIES) {
            zip.close();
            reject(new Error(`more than ${MAX_ZIP_ENTRIES} entries`));
            return;
          }
          zip.readEntry();
        });
        zip.on('end', () => resolve({ zip, entries }));
        zip.on('error', reject);
        zip.readEntry();
      },
    );
  });
}

function entryStream(zip: yauzl.ZipFile, entry: yauzl.Entry): Promise<Readable> {
  return new Promise((resolve, reject) =>
    zip.openReadStream(entry, (err, stream) =>
      err || !stream ? reject(err ?? new Error('no stream')) : resolve(stream),
    ),
  );
}

function entryName(entry: yauzl.Entry): string {
  const raw = entry.fileName as unknown as Buffer | string;
  if (typeof raw === 'string') return raw;
  // Bit 11 (EFS) marks UTF-8 names; otherwise CP437, read as latin1 here (close enough for checks).
  return yauzl.getFileNameLowLevel(entry.generalPurposeBitFlag, raw, entry.extraFields, false);
}

function parseNumbers(text: string): number[] | null {
  const parts = text.trim().split(/\s+/).filter(Boolean);
  const nums = parts.map(Number);
  return nums.every(Number.isFinite) ? nums : null;
}

export async function inspectZip(path: string, size: number, label: string): Promise<StudyIntake> {
  let opened: OpenedZip;
  try {
    opened = await openZip(path);
  } catch (err) {
    throw invalidStudy([
      { file: label, reason: `not a readable ZIP archive (${(err as Error).message})` },
    ]);
  }
  const { zip, entries } = opened;
  try {
    const problems: FileProblem[] = [];
    const files: { name: string; entry: yauzl.Entry }[] = [];
    let totalUncompressed = 0;
    for (const entry of entries) {
      const name = entryName(entry);
      const unsafe = unsafePath(name);
      if (unsafe) {
        problems.push({ file: name, reason: unsafe });
        continue;
      }
      if (name.endsWith('/')) continue;
      totalUncompressed += entry.uncompressedSize;
      const ratio = entry.uncompressedSize / Math.max(1, entry.compressedSize);
      if (entry.uncompressedSize > RATIO_CHECK_MIN_BYTES && ratio > MAX_EXPANSION_RATIO) {
        problems.push({
          file: name,
          reason: `expansion ratio ${Math.round(ratio)}:1 exceeds ${MAX_EXPANSION_RATIO}:1 (zip bomb refused)`,
        });
        continue;
      }
      files.push({ name, entry });
    }
    if (problems.length > 0) throw invalidStudy(problems);
    if (totalUncompressed > LIMITS.maxStudyBytes) {
      throw new SandboxError(
        413,
        'study_too_large',
        `archive expands to ${totalUncompressed} bytes, over the ${LIMITS.maxStudyBytes}-byte study limit`,
      );
    }
    if (
      totalUncompressed > RATIO_CHECK_MIN_BYTES &&
      totalUncompressed / Math.max(1, size) > MAX_EXPANSION_RATIO
    ) {
      throw invalidStudy([
        {
          file: label,
          reason: `archive expansion ratio ${Math.round(totalUncompressed / size)}:1 exceeds ${MAX_EXPANSION_RATIO}:1 (zip bomb refused)`,
        },
      ]);
    }

    const dicoms = new DicomCollector();
    const nifti: string[] = [];
    const bvecs = new Map<string, yauzl.Entry>();
    const bvals = new Map<string, yauzl.Entry>();
    let sidecar: Metadata = {};
    const readText = async (f: { name: string; entry: yauzl.Entry }): Promise<string | null> => {
      if (f.entry.uncompressedSize > MAX_TEXT_ENTRY_BYTES) {
        problems.push({ file: f.name, reason: `larger than ${MAX_TEXT_ENTRY_BYTES} bytes` });
        return null;
      }
      return (
        await readStreamPrefix(await entryStream(zip, f.entry), MAX_TEXT_ENTRY_BYTES)
      ).toString('utf8');
    };

    for (const f of files) {
      const lower = f.name.toLowerCase();
      const stem = f.name.replace(/\.(nii\.gz|nii|bvec|bval|json)$/i, '');
      if (lower.endsWith('.bvec')) bvecs.set(stem, f.entry);
      else if (lower.endsWith('.bval')) bvals.set(stem, f.entry);
      else if (lower.endsWith('.nii') || lower.endsWith('.nii.gz')) {
        let header: Buffer;
        const raw = await entryStream(zip, f.entry);
        if (lower.endsWith('.gz')) {
          const gunzip = createGunzip();
          raw.on('error', (err) => gunzip.destroy(err));
          header = await readStreamPrefix(raw.pipe(gunzip), 352).catch(() => Buffer.alloc(0));
        } else header = await readStreamPrefix(raw, 352);
        // NIfTI-1: sizeof_hdr = 348 and magic "n+1\0" (single file) at byte 344.
        const le = header.length >= 348 && header.readInt32LE(0) === 348;
        const be = header.length >= 348 && header.readInt32BE(0) === 348;
        const magic = header.length >= 348 ? header.toString('latin1', 344, 347) : '';
        if (!(le || be) || magic !== 'n+1')
          problems.push({
            file: f.name,
            reason: 'not a NIfTI-1 image (sizeof_hdr 348 and magic "n+1" expected)',
          });
        else nifti.push(f.name);
      } else if (lower.endsWith('.json')) {
        const text = await readText(f);
        if (text === null) continue;
        try {
          const parsed: unknown = JSON.parse(text);
          if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
            throw new Error('top level is not an object');
          const r = metadataFromSidecar(parsed as Record<string, unknown>);
          r.problems.forEach((reason) => problems.push({ file: f.name, reason }));
          sidecar = { ...sidecar, ...r.metadata };
        } catch (err) {
          problems.push({
            file: f.name,
            reason: `JSON sidecar is not valid JSON (${(err as Error).message})`,
          });
        }
      } else if (ignorable(f.name)) {
        continue;
      } else {
        const total = f.entry.uncompressedSize;
        let result = inspectDicom(
          await readStreamPrefix(await entryStream(zip, f.entry), HEADER_PREFIX_BYTES),
          total,
        );
        if (result.ok === 'need-more')
          result = inspectDicom(
            await readStreamPrefix(await entryStream(zip, f.entry), MAX_HEADER_PREFIX_BYTES),
            total,
          );
        if (result.ok === true) dicoms.add(f.name, result.info);
        else
          problems.push({
            file: f.name,
            reason: result.ok === false ? result.reason : 'DICOM header too large',
          });
      }
    }

    let directions: number | null = null;
    for (const n of nifti) {
      const stem = n.replace(/\.(nii\.gz|nii)$/i, '');
      const bvec = bvecs.get(stem) ?? (bvecs.size === 1 ? [...bvecs.values()][0] : undefined);
      const bval = bvals.get(stem) ?? (bvals.size === 1 ? [...bvals.values()][0] : undefined);
      if (!bvec || !bval) {
        problems.push({
          file: n,
          reason: `NIfTI image needs its ${!bvec ? '.bvec' : '.bval'} file (${stem}${!bvec ? '.bvec' : '.bval'}) in the same archive`,
        });
        continue;
      }
      const bvalText = await readText({ name: `${stem}.bval`, entry: bval });
      const bvecText = await readText({ name: `${stem}.bvec`, entry: bvec });
      if (bvalText === null || bvecText === null) continue;
      const values = parseNumbers(bvalText);
      const rows = bvecText
        .trim()
        .split(/\r?\n/)
        .map((l) => parseNumbers(l));
      if (!values || values.length === 0)
        problems.push({ file: `${stem}.bval`, reason: 'must hold whitespace-separated b-values' });
      else if (rows.length !== 3 || rows.some((r) => !r || r.length !== values.length)) {
        problems.push({
          file: `${stem}.bvec`,
          reason: `must hold 3 rows of ${values.length} numbers, one column per b-value`,
        });
      } else directions = values.length;
    }
    problems.push(...dicoms.problems());
    if (problems.length > 0) throw invalidStudy(problems);
    if (nifti.length === 0 && dicoms.infos.length === 0) {
      throw invalidStudy([
        { file: label, reason: 'archive holds no DICOM files and no .nii/.nii.gz image' },
      ]);
    }
    if (nifti.length > 0)
      return summarize(
        'nifti-zip',
        size,
        dicoms,
        { niftiFiles: nifti, diffusionDirections: directions },
        sidecar,
      );
    return summarize('dicom-zip', size, dicoms, {}, sidecar);
  } finally {
    zip.close();
  }
}
