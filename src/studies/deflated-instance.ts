import { createReadStream, createWriteStream } from 'node:fs';
import { open, rename, rm } from 'node:fs/promises';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createInflateRaw } from 'node:zlib';
import { fileMetaInformation } from './part10-meta';
import { metaGroupEnd, walkDataSet } from './dicom-dataset-walk';
import { withoutTrailing } from '../common/padding';
import {
  DEFLATED_EXPLICIT_VR_LE,
  EXPLICIT_VR_LE,
  FAILURE_REASON,
} from './dicom-instance.validator';

/**
 * Deflated Explicit VR Little Endian (PS3.5 §A.5) is a legal transfer syntax for any
 * instance: the data set of Explicit VR Little Endian, deflated (RFC 1951, no header). It was
 * refused (C122) because the header cannot be read without inflating it. Inflating it is
 * lossless and gives the same data set in Explicit VR Little Endian, which every reader (and
 * the upstream) takes: the file is rewritten so, with File Meta Information of ours naming
 * the new transfer syntax (PS3.10 §7.1: the meta names who wrote the file), streamed, and
 * bounded: a small deflated body that inflates past `maxBytes` (a deflate bomb) is refused
 * A700 before it fills the disk.
 */
export type InflateOutcome =
  | { kind: 'unchanged' }
  | { kind: 'inflated' }
  | { kind: 'refused'; failureReason: number; reason: string };

const HEAD_BYTES = 64 * 1024;

export async function inflateIfDeflated(path: string, maxBytes: number): Promise<InflateOutcome> {
  const head = await readHead(path);
  if (head.length < 144 || head.toString('latin1', 128, 132) !== 'DICM') {
    return { kind: 'unchanged' };
  }
  const end = metaGroupEnd(head, 132, true);
  if (end.kind !== 'end') return { kind: 'unchanged' }; // the check names the problem
  const meta = walkDataSet(
    head.subarray(0, end.at),
    132,
    'explicit-le',
    new Set(['00020002', '00020003', '00020010']),
    true,
  );
  if (meta.kind !== 'walked') return { kind: 'unchanged' };
  const text = (tag: string) =>
    withoutTrailing(meta.elements.get(tag)?.value.toString('latin1') ?? '', '\0 ');
  if (text('00020010') !== DEFLATED_EXPLICIT_VR_LE) return { kind: 'unchanged' };

  // Ends in .part: a crash mid-way leaves it to the incoming sweep.
  const target = `${path}.inflated.part`;
  const out = createWriteStream(target, { mode: 0o600 });
  out.write(fileMetaInformation(text('00020002'), text('00020003'), EXPLICIT_VR_LE));
  let total = 0;
  const bounded = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      total += chunk.length;
      if (total > maxBytes) callback(new TooLarge());
      else callback(null, chunk);
    },
  });
  try {
    await pipeline(createReadStream(path, { start: end.at }), createInflateRaw(), bounded, out);
  } catch (error) {
    await rm(target, { force: true });
    if (error instanceof TooLarge) {
      return {
        kind: 'refused',
        failureReason: FAILURE_REASON.outOfResources,
        reason: `the deflated data set inflates past ${maxBytes} bytes`,
      };
    }
    return {
      kind: 'refused',
      failureReason: FAILURE_REASON.cannotUnderstand,
      reason: 'the deflated data set cannot be inflated',
    };
  }
  await rename(target, path);
  return { kind: 'inflated' };
}

class TooLarge extends Error {}

async function readHead(path: string): Promise<Buffer> {
  const handle = await open(path, 'r');
  try {
    const buffer = Buffer.alloc(HEAD_BYTES);
    const { bytesRead } = await handle.read(buffer, 0, HEAD_BYTES, 0);
    return buffer.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
}
