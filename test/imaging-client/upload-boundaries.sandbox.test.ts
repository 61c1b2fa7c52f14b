import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createMrBrainSeries, generateUid, zipEntries } from '../helpers/dicom-factory';
import { buildClient, startTestSandbox } from './sandbox-harness';

jest.setTimeout(120_000);

const MIB = 1024 * 1024;

/**
 * Issue #17 items 1 and 7 at the boundaries, both sides real: the client plans and uploads
 * studies of exact sizes around 5,000,000 bytes and 10 MiB to the sandbox, which enforces the
 * strict (decimal) reading of the contract's "5 MB" single-PUT limit.
 */
async function studyOfExactly(size: number, dir: string): Promise<string> {
  const uid = generateUid();
  const dicom = createMrBrainSeries({ study: { studyInstanceUid: uid }, series: { slices: 1 } })[0]!
    .bytes;
  // The study's one instance, grown with Data Set Trailing Padding (FFFC,FFFC) OB — valid
  // DICOM of any even length (PS3.10 §7.2) — and the optional metadata.json sidecar, whose note
  // takes up the last few bytes so that the stored archive has exactly `size` bytes.
  const padded = (length: number) => {
    const header = Buffer.from([0xfc, 0xff, 0xfc, 0xff, 0x4f, 0x42, 0, 0, 0, 0, 0, 0]);
    header.writeUInt32LE(length, 8);
    return Buffer.concat([dicom, header, Buffer.alloc(length)]);
  };
  const build = (dicomPad: number, notePad: number) =>
    zipEntries([
      { name: `DICOM/1/${uid}.dcm`, data: padded(dicomPad), store: true },
      {
        name: 'metadata.json',
        data: Buffer.from(JSON.stringify({ clinical_note: 'x'.repeat(notePad) })),
        store: true,
      },
    ]);
  // Stored entries: the archive grows byte for byte with either padding.
  const probe = await build(0, 0);
  const rest = size - probe.length;
  const dicomPad = Math.max(0, (rest - 100) & ~1);
  const zip = await build(dicomPad, rest - dicomPad);
  if (zip.length !== size) throw new Error(`built ${zip.length} bytes, wanted ${size}`);
  const path = join(dir, `${size}.zip`);
  await writeFile(path, zip);
  return path;
}

describe('upload boundaries under the safe reading of MB', () => {
  let peer: Awaited<ReturnType<typeof startTestSandbox>>;
  let dir: string;
  beforeAll(async () => {
    peer = await startTestSandbox();
    dir = await mkdtemp(join(tmpdir(), 'upload-boundaries-'));
  });
  afterAll(async () => {
    await peer?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it.each([
    [4_999_999, 'single', 1],
    [5_000_000, 'multipart', 1],
    [5 * MIB, 'multipart', 1],
    [10 * MIB + 1, 'multipart', 2],
  ] as const)(
    '%i bytes go up as %s in %i part(s), accepted by the sandbox',
    async (size, mode, partCount) => {
      const c = buildClient(peer.sandbox.baseUrl);
      try {
        const { orderId } = await c.client.createOrder(
          { study_uid: generateUid() },
          { correlationId: randomUUID() },
        );
        const result = await c.uploader.upload(orderId, await studyOfExactly(size, dir));
        expect(result).toMatchObject({ mode, sizeBytes: size, partCount });
      } finally {
        await c.close();
      }
    },
  );

  it('the sandbox refuses a single PUT of 5,000,000 bytes (413): the strict reading', async () => {
    const c = buildClient(peer.sandbox.baseUrl);
    try {
      const { orderId } = await c.client.createOrder(
        { study_uid: generateUid() },
        { correlationId: randomUUID() },
      );
      const { url } = await c.client.uploads.getSinglePutUrl(orderId);
      const res = await fetch(url, { method: 'PUT', body: Buffer.alloc(5_000_000, 1) });
      await res.arrayBuffer();
      expect(res.status).toBe(413);
    } finally {
      await c.close();
    }
  });
});
