import { createWriteStream } from 'node:fs';
import { once } from 'node:events';
import { ZipFile } from 'yazl';
import { createMrBrainSeries, generateUid } from '../../test/helpers/dicom-factory';

/**
 * Writes a synthetic DICOM study of at least `sizeBytes` as a stored (uncompressed) ZIP,
 * streamed to disk so the generator never holds the study in memory: a few real 512×512 MR
 * slices written under successive instance numbers until the size is reached. The sandbox
 * validates the archive on completion, so the bytes must be a genuine study.
 */
export async function writeSyntheticStudy(
  path: string,
  sizeBytes: number,
): Promise<{ studyUid: string; bytes: number }> {
  const studyUid = generateUid();
  const slices = createMrBrainSeries({
    study: { studyInstanceUid: studyUid },
    series: { slices: 8, rows: 512, columns: 512 },
  });
  const zip = new ZipFile();
  const out = createWriteStream(path);
  zip.outputStream.pipe(out);
  let total = 0;
  for (let i = 0; total < sizeBytes; i++) {
    const slice = slices[i % slices.length];
    zip.addBuffer(slice.bytes, `DICOM/S000001/IM${String(i + 1).padStart(5, '0')}.dcm`, {
      compress: false,
    });
    total += slice.bytes.length;
    // Let the output drain now and then, so queued buffers do not pile up.
    if (i % 64 === 63) await new Promise((resolve) => setImmediate(resolve));
  }
  zip.end();
  await once(out, 'finish');
  return { studyUid, bytes: out.bytesWritten };
}
