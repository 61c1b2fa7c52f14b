import { open as openFile, stat } from 'node:fs/promises';
import {
  HEADER_PREFIX_BYTES,
  MAX_HEADER_PREFIX_BYTES,
  hasDicmPrefix,
  inspectDicom,
} from './dicom-header';
import { invalidStudy } from './sandbox.error';
import { inspectZip } from './study-archive';
import { DicomCollector, summarize, type StudyIntake } from './study-summary';

// The archive inspection and the intake summary live in their own files; re-exported here so
// that callers keep importing them from the intake.
export { MAX_EXPANSION_RATIO } from './study-archive';
export type { StudyIntake } from './study-summary';

async function readFilePrefix(path: string, bytes: number): Promise<Buffer> {
  const fh = await openFile(path, 'r');
  try {
    const buf = Buffer.alloc(bytes);
    const { bytesRead } = await fh.read(buf, 0, bytes, 0);
    return buf.subarray(0, bytesRead);
  } finally {
    await fh.close();
  }
}

/** Validates one uploaded object (a DICOM file or a ZIP) and reads its metadata. Throws invalid_study. */
export async function inspectStudyObject(path: string, label: string): Promise<StudyIntake> {
  const { size } = await stat(path);
  const head = await readFilePrefix(path, HEADER_PREFIX_BYTES);
  if (head.length >= 4 && head.readUInt32LE(0) === 0x04034b50) return inspectZip(path, size, label);
  if (!hasDicmPrefix(head)) {
    throw invalidStudy([
      {
        file: label,
        reason: 'neither a DICOM Part 10 file (no "DICM" prefix at byte 128) nor a ZIP archive',
      },
    ]);
  }
  let result = inspectDicom(head, size);
  if (result.ok === 'need-more')
    result = inspectDicom(await readFilePrefix(path, MAX_HEADER_PREFIX_BYTES), size);
  if (result.ok === 'need-more')
    throw invalidStudy([
      { file: label, reason: `DICOM header does not end within ${MAX_HEADER_PREFIX_BYTES} bytes` },
    ]);
  if (result.ok === false) throw invalidStudy([{ file: label, reason: result.reason }]);
  const dicoms = new DicomCollector();
  dicoms.add(label, result.info);
  return summarize('dicom', size, dicoms, {}, {});
}
