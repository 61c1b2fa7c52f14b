import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { request } from 'node:http';
import { join } from 'node:path';
import {
  createMrBrainSeries,
  createNiftiDiffusion,
  notDicomBytes,
  shortPixelData,
  truncatePixelData,
  zipEntries,
  zipStudy,
} from '../helpers/dicom-factory';
import { rawInstance, relabelledUnSequence } from '../helpers/raw-dicom';
import { DEFAULT_STEP_SECONDS } from '../../src/sandbox/sandbox-options';
import {
  MINUTE,
  SECOND,
  historyOf,
  newOrder,
  patchZipName,
  putDeclaringLength,
  putObject,
  singlePutUrl,
  startHarness,
  statusOf,
  uploadSingle,
  type Harness,
} from './sandbox-test-kit';

const MiB = 1024 * 1024;

describe('sandbox: presigned uploads and study intake', () => {
  let h: Harness;
  let t: string;
  beforeAll(async () => {
    // A long review step keeps `in_review` orders in progress while the clock moves by minutes.
    h = await startHarness({
      maxConcurrentUploads: 3,
      steps: { ...DEFAULT_STEP_SECONDS, review: 24 * 3600 },
    });
    t = await h.token();
  });
  afterAll(async () => h.close());

  describe('single PUT', () => {
    it('stores a DICOM file through a presigned URL without Authorization, answers an ETag and starts processing', async () => {
      const [instance] = createMrBrainSeries({ series: { slices: 1 } });
      const id = await newOrder(h);
      const url = await singlePutUrl(h, id);
      expect(url).not.toContain(t);
      const r = await putObject(url, instance.bytes);
      expect(r.status).toBe(200);
      expect(r.headers.get('etag')).toMatch(/^"[0-9a-f]{32}"$/);
      expect(await statusOf(h, id)).toBe('RECEIVED');
      const files = await readdir(join(h.sandbox.dataRoot, 'objects', id));
      expect(files).toHaveLength(1);
    });

    it('accepts the sample study the sandbox serves for demos (docs/sandbox.md walk-through)', async () => {
      const sample = await fetch(h.base.replace(/\/v1$/, '/sandbox/sample-study.dcm?seed=walk'));
      expect(sample.headers.get('content-type')).toBe('application/dicom');
      const bytes = Buffer.from(await sample.arrayBuffer());
      const id = await newOrder(h);
      await uploadSingle(h, id, bytes);
      const m = (await h.call('GET', '/metadata', { token: t, query: { order_id: id } })).json
        .metadata as Record<string, unknown>;
      expect(m).toMatchObject({
        patient_id: 'SBX-DEMO-1',
        modality: 'MR',
        study_uid: expect.stringMatching(/^2\.25\.\d+$/),
      });
    });

    it('returns the URL with its expiry one hour ahead', async () => {
      const id = await newOrder(h);
      const r = await h.call('GET', '/upload/single-put', { token: t, query: { order_id: id } });
      expect(r.status).toBe(200);
      const ahead = Date.parse(r.json.expires_at as string) - h.sandbox.clock.now();
      expect(ahead).toBeGreaterThan(3590 * SECOND);
      expect(ahead).toBeLessThanOrEqual(3600 * SECOND);
    });

    it('refuses a PUT that carries an Authorization header (400)', async () => {
      const id = await newOrder(h);
      const r = await putObject(
        await singlePutUrl(h, id),
        createMrBrainSeries({ series: { slices: 1 } })[0].bytes,
        { authorization: `Bearer ${t}` },
      );
      expect(r.status).toBe(400);
      expect(r.json.error).toBe('authorization_not_allowed');
      expect(await statusOf(h, id)).toBe('PENDING');
    });

    it('refuses a tampered URL, an expired URL and a non-PUT method with 403', async () => {
      const id = await newOrder(h);
      const url = await singlePutUrl(h, id);
      const bytes = createMrBrainSeries({ series: { slices: 1 } })[0].bytes;
      const otherOrder = await newOrder(h);
      const retargeted = url.replace(id, otherOrder);
      const tampered = await putObject(retargeted, bytes);
      expect(tampered.status).toBe(403);
      expect(tampered.json.error).toBe('signature_mismatch');
      const longer = new URL(url);
      longer.searchParams.set(
        'X-Sandbox-Expires',
        String(Number(longer.searchParams.get('X-Sandbox-Expires')) + 3600),
      );
      expect((await putObject(longer.toString(), bytes)).status).toBe(403);
      const stripped = await putObject(url.split('?')[0], bytes);
      expect(stripped.status).toBe(403);
      const read = await fetch(url);
      expect(read.status).toBe(403);
      expect(((await read.json()) as { error: string }).error).toBe('write_only');
      await h.sandbox.advance(3601 * SECOND);
      const expired = await putObject(url, bytes);
      expect(expired.status).toBe(403);
      expect(expired.json.error).toBe('url_expired');
      t = await h.token();
    });

    it('refuses an empty body (400) and an object over 5 MB (413)', async () => {
      const id = await newOrder(h);
      const empty = await putObject(await singlePutUrl(h, id), Buffer.alloc(0));
      expect(empty.status).toBe(400);
      expect(empty.json.error).toBe('empty_body');
      const big = await putObject(await singlePutUrl(h, id), Buffer.alloc(5 * MiB + 1, 1));
      expect(big.status).toBe(413);
      expect(big.json.error).toBe('entity_too_large');
      // "5 MB or larger use multipart": exactly 5 MiB is already too large for a single PUT.
      const exactly = await putObject(await singlePutUrl(h, id), Buffer.alloc(5 * MiB, 1));
      expect(exactly.status).toBe(413);
      expect(await statusOf(h, id)).toBe('PENDING');
    });

    it.each([
      ['a private sequence relabelled UN whose item is still explicit VR', 'relabelled'],
      ['explicit VR big endian', 'big-endian'],
      ['deflated explicit VR little endian', 'deflated'],
    ])('accepts an instance in %s, as the adapter does (not invalid_study)', async (_l, shape) => {
      // The adapter stores and packages all three (docs/studies.md); its upload must not be
      // refused by the sandbox's own header reader. dcmjs read the relabelled sequence's
      // explicit VR item as implicit VR and ran off the end of the header.
      const raw = rawInstance({
        accession: 'SHAPE-1',
        patientId: 'PID-SHAPE',
        ...(shape === 'relabelled' ? { beforePatient: relabelledUnSequence() } : {}),
        ...(shape === 'deflated' ? { deflated: {} } : {}),
      });
      let bytes = raw.bytes;
      if (shape === 'big-endian') {
        const dir = mkdtempSync(join(tmpdir(), 'sbx-be-'));
        writeFileSync(join(dir, 'le.dcm'), bytes);
        execFileSync('dcmconv', ['+tb', join(dir, 'le.dcm'), join(dir, 'be.dcm')]);
        bytes = readFileSync(join(dir, 'be.dcm'));
        rmSync(dir, { recursive: true, force: true });
      }
      const id = await newOrder(h);
      const r = await putObject(await singlePutUrl(h, id), bytes);
      expect({ status: r.status, files: r.json?.files }).toEqual({ status: 200, files: undefined });
      expect(await statusOf(h, id)).toBe('RECEIVED');
    });

    it('refuses a file that is not DICOM, naming the file and the reason', async () => {
      const id = await newOrder(h);
      const r = await putObject(await singlePutUrl(h, id), notDicomBytes());
      expect(r.status).toBe(400);
      expect(r.json.error).toBe('invalid_study');
      expect(r.json.files).toEqual([
        { file: 'uploaded object', reason: expect.stringContaining('DICM') },
      ]);
      expect(await statusOf(h, id)).toBe('PENDING');
      const named = await putObject(await singlePutUrl(h, id), notDicomBytes(), {
        'content-disposition': 'attachment; filename="IM0001.dcm"',
      });
      expect(named.json.files).toEqual([
        { file: 'IM0001.dcm', reason: expect.stringContaining('DICM') },
      ]);
    });

    it('refuses incomplete uncompressed pixel data, both cut short and under-declared', async () => {
      const [instance] = createMrBrainSeries({ series: { slices: 1, rows: 64, columns: 64 } });
      const id = await newOrder(h);
      const cut = await putObject(
        await singlePutUrl(h, id),
        truncatePixelData(instance.bytes, 1000),
      );
      expect(cut.status).toBe(400);
      expect(cut.json.message).toMatch(/incomplete pixel data/);
      expect((cut.json.files as { reason: string }[])[0].reason).toMatch(
        /declares 8192 bytes but only 1000/,
      );
      const short = await putObject(
        await singlePutUrl(h, id),
        shortPixelData(instance.bytes, 1000),
      );
      expect(short.status).toBe(400);
      expect((short.json.files as { reason: string }[])[0].reason).toMatch(
        /1000 bytes present, 8192 expected/,
      );
    });
  });

  describe('ZIP archives', () => {
    it('accepts a ZIP of a DICOM study and reads its tags into metadata', async () => {
      const series = createMrBrainSeries({
        patient: { patientId: 'ZIP-PID', patientName: 'Zip^Zed' },
        series: { slices: 5 },
      });
      const zip = await zipStudy(series, [{ name: 'README.txt', data: Buffer.from('export') }]);
      const id = await newOrder(h, { sandbox_outcome: 'in_review' });
      await uploadSingle(h, id, zip);
      const m = (await h.call('GET', '/metadata', { token: t, query: { order_id: id } })).json
        .metadata as Record<string, unknown>;
      expect(m).toMatchObject({
        patient_id: 'ZIP-PID',
        patient_name: 'Zip^Zed',
        study_uid: series[0].studyInstanceUid,
      });
      await h.sandbox.advance(5 * SECOND);
      const info = await h.call('GET', '/qc-report', {
        token: t,
        query: { order_id: id, report_type: 'additional_info' },
      });
      expect(info.json.acquisition).toMatchObject({
        instance_count: 5,
        series_count: 1,
        upload_kind: 'dicom-zip',
        rows: 32,
      });
    });

    it('accepts a NIfTI image with its .bvec and .bval and a JSON sidecar', async () => {
      const n = createNiftiDiffusion(7);
      const zip = await zipEntries([
        { name: 'dwi/sub-01_dwi.nii.gz', data: n.niiGz },
        { name: 'dwi/sub-01_dwi.bvec', data: n.bvec },
        { name: 'dwi/sub-01_dwi.bval', data: n.bval },
        {
          name: 'dwi/sub-01_dwi.json',
          data: Buffer.from(
            JSON.stringify({
              PatientID: 'SIDECAR-PID',
              study_uid: '1.2.826.0.1.3680043.8.498.9',
              EchoTime: 0.089,
            }),
          ),
        },
      ]);
      const id = await newOrder(h, { patient_id: 'API-PID' });
      await uploadSingle(h, id, zip);
      const m = (await h.call('GET', '/metadata', { token: t, query: { order_id: id } })).json
        .metadata as Record<string, unknown>;
      expect(m).toMatchObject({ patient_id: 'API-PID', study_uid: '1.2.826.0.1.3680043.8.498.9' });
      const plain = await zipEntries([
        { name: 'a.nii', data: n.nii },
        { name: 'a.bvec', data: n.bvec },
        { name: 'a.bval', data: n.bval },
      ]);
      const id2 = await newOrder(h);
      expect((await putObject(await singlePutUrl(h, id2), plain)).status).toBe(200);
    });

    it('refuses a NIfTI image without its .bvec, and inconsistent gradient files', async () => {
      const n = createNiftiDiffusion(7);
      const id = await newOrder(h);
      const missing = await putObject(
        await singlePutUrl(h, id),
        await zipEntries([
          { name: 'dwi.nii.gz', data: n.niiGz },
          { name: 'dwi.bval', data: n.bval },
        ]),
      );
      expect(missing.status).toBe(400);
      expect(missing.json.files).toEqual([
        { file: 'dwi.nii.gz', reason: expect.stringContaining('.bvec') },
      ]);
      const mismatch = await putObject(
        await singlePutUrl(h, id),
        await zipEntries([
          { name: 'dwi.nii.gz', data: n.niiGz },
          { name: 'dwi.bval', data: Buffer.from('0 1000 1000\n') },
          { name: 'dwi.bvec', data: n.bvec },
        ]),
      );
      expect(mismatch.status).toBe(400);
      expect((mismatch.json.files as { file: string }[])[0].file).toBe('dwi.bvec');
    });

    it('refuses an entry whose path climbs out with ../', async () => {
      const [instance] = createMrBrainSeries({ series: { slices: 1 } });
      const zip = patchZipName(
        await zipEntries([{ name: 'xx/evil.dcm', data: instance.bytes }]),
        'xx/evil.dcm',
        '../evil.dcm',
      );
      const id = await newOrder(h);
      const r = await putObject(await singlePutUrl(h, id), zip);
      expect(r.status).toBe(400);
      expect(r.json.files).toEqual([
        { file: '../evil.dcm', reason: expect.stringContaining('../') },
      ]);
    });

    it('refuses a zip bomb (absurd expansion ratio)', async () => {
      const zip = await zipEntries([{ name: 'bomb.dcm', data: Buffer.alloc(40 * MiB, 0) }]);
      expect(zip.length).toBeLessThan(5 * MiB);
      const id = await newOrder(h);
      const r = await putObject(await singlePutUrl(h, id), zip);
      expect(r.status).toBe(400);
      expect(r.json.files).toEqual([
        { file: 'bomb.dcm', reason: expect.stringMatching(/expansion ratio \d+:1 exceeds 100:1/) },
      ]);
    });

    it('names every bad file of an archive: not DICOM, truncated pixel data, a second study', async () => {
      const series = createMrBrainSeries({ series: { slices: 2 } });
      const other = createMrBrainSeries({ series: { slices: 1 } });
      const zip = await zipEntries([
        { name: 'IM1.dcm', data: series[0].bytes },
        { name: 'IM2.dcm', data: truncatePixelData(series[1].bytes, 10) },
        { name: 'notes.pdf', data: notDicomBytes() },
        { name: 'OTHER.dcm', data: other[0].bytes },
      ]);
      const id = await newOrder(h);
      const r = await putObject(await singlePutUrl(h, id), zip);
      expect(r.status).toBe(400);
      const files = r.json.files as { file: string; reason: string }[];
      expect(files.map((f) => f.file).sort()).toEqual(['IM2.dcm', 'OTHER.dcm', 'notes.pdf']);
      expect(files.find((f) => f.file === 'IM2.dcm')!.reason).toMatch(/incomplete pixel data/);
      expect(files.find((f) => f.file === 'OTHER.dcm')!.reason).toMatch(/belongs to study/);
    });
  });

  describe('multipart', () => {
    const initiate = async (orderId: string, extra: Record<string, unknown> = {}) =>
      h.call('POST', '/upload/multipart/initiate', {
        token: t,
        json: { order_id: orderId, ...extra },
      });

    it('uploads a study in parts, checks part numbers and ETags, and starts processing on complete', async () => {
      // Two parts of at least 5 MiB each (contract, Limits: chunk size 5 MB to 100 MB).
      const series = createMrBrainSeries({ series: { slices: 5, rows: 1024, columns: 1024 } });
      const zip = await zipStudy(series, [], { store: true });
      expect(zip.length).toBeGreaterThan(10 * MiB);
      const id = await newOrder(h);
      const init = await initiate(id, { size_bytes: zip.length });
      expect(init.status).toBe(201);
      const uploadId = init.json.upload_id as string;
      const urls = await h.call('POST', '/upload/multipart/presigned-urls', {
        token: t,
        json: { upload_id: uploadId, parts: 2 },
      });
      expect(urls.status).toBe(200);
      const list = urls.json.urls as { part_number: number; url: string }[];
      expect(list.map((u) => u.part_number)).toEqual([1, 2]);
      const [p1, p2] = await Promise.all([
        putObject(list[0].url, zip.subarray(0, 5 * MiB)),
        putObject(list[1].url, zip.subarray(5 * MiB)),
      ]);
      expect([p1.status, p2.status]).toEqual([200, 200]);
      const etag1 = p1.headers.get('etag')!;
      const etag2 = p2.headers.get('etag')!;

      const wrong = await h.call('POST', '/upload/multipart/complete', {
        token: t,
        json: {
          upload_id: uploadId,
          parts: [
            { part_number: 1, etag: etag1 },
            { part_number: 2, etag: '"00000000000000000000000000000000"' },
          ],
        },
      });
      expect(wrong.status).toBe(400);
      expect(wrong.json.error).toBe('invalid_part');
      const reused = await h.call('POST', '/upload/multipart/complete', {
        token: t,
        json: {
          upload_id: uploadId,
          parts: [
            { part_number: 1, etag: etag1 },
            { part_number: 2, etag: etag1 },
          ],
        },
      });
      expect(reused.status).toBe(400);
      expect(reused.json.error).toBe('invalid_part');
      const unordered = await h.call('POST', '/upload/multipart/complete', {
        token: t,
        json: {
          upload_id: uploadId,
          parts: [
            { part_number: 2, etag: etag2 },
            { part_number: 1, etag: etag1 },
          ],
        },
      });
      expect(unordered.status).toBe(400);
      expect(unordered.json.error).toBe('invalid_part_order');
      expect(await statusOf(h, id)).toBe('PENDING');

      const done = await h.call('POST', '/upload/multipart/complete', {
        token: t,
        json: {
          upload_id: uploadId,
          parts: [
            { part_number: 1, etag: etag1 },
            { part_number: 2, etag: etag2 },
          ],
        },
      });
      expect(done.status).toBe(200);
      expect(done.json).toEqual({ order_id: id, status: 'RECEIVED' });
      const m = (await h.call('GET', '/metadata', { token: t, query: { order_id: id } })).json
        .metadata as Record<string, unknown>;
      expect(m.study_uid).toBe(series[0].studyInstanceUid);
      const twice = await h.call('POST', '/upload/multipart/complete', {
        token: t,
        json: { upload_id: uploadId, parts: [{ part_number: 1, etag: etag1 }] },
      });
      expect(twice.status).toBe(409);
      expect(await readdir(join(h.sandbox.dataRoot, 'uploads'))).toEqual([]);
    });

    it('rejects the ETag of a part that was uploaded again (stale ETag)', async () => {
      const id = await newOrder(h);
      const uploadId = (await initiate(id)).json.upload_id as string;
      const [url] = (
        await h.call('POST', '/upload/multipart/presigned-urls', {
          token: t,
          json: { upload_id: uploadId, parts: 1 },
        })
      ).json.urls as { url: string }[];
      // One instance of 1600 x 1600 (16-bit): 5,120,000 pixel bytes, a part of at least 5 MB.
      const bytes = createMrBrainSeries({ series: { slices: 1, rows: 1600, columns: 1600 } })[0]
        .bytes;
      const first = await putObject(url.url, bytes);
      const second = await putObject(url.url, bytes);
      expect(first.headers.get('etag')).not.toBe(second.headers.get('etag'));
      const stale = await h.call('POST', '/upload/multipart/complete', {
        token: t,
        json: { upload_id: uploadId, parts: [{ part_number: 1, etag: first.headers.get('etag') }] },
      });
      expect(stale.status).toBe(400);
      const ok = await h.call('POST', '/upload/multipart/complete', {
        token: t,
        json: {
          upload_id: uploadId,
          parts: [{ part_number: 1, etag: second.headers.get('etag') }],
        },
      });
      expect(ok.status).toBe(200);
    });

    it('refuses 101 parts, part numbers over 100, a first part under 5 MB, and unknown parts', async () => {
      const id = await newOrder(h);
      const uploadId = (await initiate(id)).json.upload_id as string;
      const tooMany = await h.call('POST', '/upload/multipart/presigned-urls', {
        token: t,
        json: { upload_id: uploadId, parts: 101 },
      });
      expect(tooMany.status).toBe(400);
      expect(tooMany.json.error).toBe('too_many_parts');
      const over = await h.call('POST', '/upload/multipart/presigned-urls', {
        token: t,
        json: { upload_id: uploadId, part_numbers: [100, 101] },
      });
      expect(over.status).toBe(400);
      const exactly100 = await h.call('POST', '/upload/multipart/presigned-urls', {
        token: t,
        json: { upload_id: uploadId, parts: 100 },
      });
      expect((exactly100.json.urls as unknown[]).length).toBe(100);
      const urls = exactly100.json.urls as { url: string }[];
      const a = await putObject(urls[0].url, Buffer.alloc(1000, 1));
      const b = await putObject(urls[1].url, Buffer.alloc(1000, 2));
      const small = await h.call('POST', '/upload/multipart/complete', {
        token: t,
        json: {
          upload_id: uploadId,
          parts: [
            { part_number: 1, etag: a.headers.get('etag') },
            { part_number: 2, etag: b.headers.get('etag') },
          ],
        },
      });
      expect(small.status).toBe(400);
      expect(small.json.error).toBe('part_too_small');
      const never = await h.call('POST', '/upload/multipart/complete', {
        token: t,
        json: { upload_id: uploadId, parts: [{ part_number: 3, etag: 'x' }] },
      });
      expect(never.status).toBe(400);
      expect(never.json.message).toMatch(/part 3 was never uploaded/);
      const empty = await putObject(urls[2].url, Buffer.alloc(0));
      expect(empty.status).toBe(400);
      await h.call('POST', '/upload/multipart/abort', { token: t, json: { upload_id: uploadId } });
    });

    it('refuses a last part under 5 MB as it refuses any other (contract, Limits: chunk size 5 MB to 100 MB), and takes one of 5,000,000 bytes', async () => {
      // 5 slices of 1024 x 1024 (16-bit): a stored ZIP of about 10.5 MB.
      const series = createMrBrainSeries({ series: { slices: 5, rows: 1024, columns: 1024 } });
      const zip = await zipStudy(series, [], { store: true });
      expect(zip.length).toBeGreaterThanOrEqual(5 * MiB + 5_000_000);
      const id = await newOrder(h);
      const uploadId = (await initiate(id, { size_bytes: zip.length })).json.upload_id as string;
      const urls = (
        await h.call('POST', '/upload/multipart/presigned-urls', {
          token: t,
          json: { upload_id: uploadId, parts: 2 },
        })
      ).json.urls as { url: string }[];
      const complete = async (...etags: (string | null)[]) =>
        h.call('POST', '/upload/multipart/complete', {
          token: t,
          json: {
            upload_id: uploadId,
            parts: etags.map((etag, i) => ({ part_number: i + 1, etag })),
          },
        });

      // The S3 habit (every part but the last): a last part of 1,000 bytes.
      const bigFirst = await putObject(urls[0].url, zip.subarray(0, zip.length - 1_000));
      const shortLast = await putObject(urls[1].url, zip.subarray(zip.length - 1_000));
      const short = await complete(bigFirst.headers.get('etag'), shortLast.headers.get('etag'));
      expect(short.status).toBe(400);
      expect(short.json.error).toBe('part_too_small');
      expect(short.json.message).toMatch(/part 2 holds 1000 bytes/);
      expect(await statusOf(h, id)).toBe('PENDING');
      await h.call('POST', '/upload/multipart/abort', { token: t, json: { upload_id: uploadId } });

      // A last part of exactly 5,000,000 bytes (5 MB read decimally): taken.
      const id2 = await newOrder(h);
      const upload2 = (await initiate(id2, { size_bytes: zip.length })).json.upload_id as string;
      const urls2 = (
        await h.call('POST', '/upload/multipart/presigned-urls', {
          token: t,
          json: { upload_id: upload2, parts: 2 },
        })
      ).json.urls as { url: string }[];
      const cut = zip.length - 5_000_000;
      const [q1, q2] = await Promise.all([
        putObject(urls2[0].url, zip.subarray(0, cut)),
        putObject(urls2[1].url, zip.subarray(cut)),
      ]);
      const done = await h.call('POST', '/upload/multipart/complete', {
        token: t,
        json: {
          upload_id: upload2,
          parts: [
            { part_number: 1, etag: q1.headers.get('etag') },
            { part_number: 2, etag: q2.headers.get('etag') },
          ],
        },
      });
      expect(done.status).toBe(200);
    });

    it('refuses a single part under 5,000,000 bytes: such a study goes as a single PUT', async () => {
      const id = await newOrder(h);
      const uploadId = (await initiate(id)).json.upload_id as string;
      const [url] = (
        await h.call('POST', '/upload/multipart/presigned-urls', {
          token: t,
          json: { upload_id: uploadId, parts: 1 },
        })
      ).json.urls as { url: string }[];
      const put = await putObject(url.url, createMrBrainSeries({ series: { slices: 1 } })[0].bytes);
      const small = await h.call('POST', '/upload/multipart/complete', {
        token: t,
        json: { upload_id: uploadId, parts: [{ part_number: 1, etag: put.headers.get('etag') }] },
      });
      expect(small.status).toBe(400);
      expect(small.json.error).toBe('part_too_small');
      expect(await statusOf(h, id)).toBe('PENDING');
      await h.call('POST', '/upload/multipart/abort', { token: t, json: { upload_id: uploadId } });
    });

    it('refuses a study over 10 GB announced in advance (413) and a part over 100 MB', async () => {
      const id = await newOrder(h);
      const big = await initiate(id, { size_bytes: 10 * 1024 * MiB + 1 });
      expect(big.status).toBe(413);
      expect(big.json.error).toBe('study_too_large');
      const bad = await initiate(id, { size_bytes: -1 });
      expect(bad.status).toBe(400);
      const uploadId = (await initiate(id)).json.upload_id as string;
      const [u] = (
        await h.call('POST', '/upload/multipart/presigned-urls', {
          token: t,
          json: { upload_id: uploadId, parts: 1 },
        })
      ).json.urls as { url: string }[];
      // Announce a 101 MB body; the sandbox answers from Content-Length without reading it all.
      const over = await putDeclaringLength(u.url, 101 * MiB);
      expect(over.status).toBe(413);
      expect(JSON.parse(over.body).error).toBe('entity_too_large');
      const single = await putDeclaringLength(await singlePutUrl(h, id), 5 * MiB + 1);
      expect(single.status).toBe(413);
      await h.call('POST', '/upload/multipart/abort', { token: t, json: { upload_id: uploadId } });
    });

    it('aborts an upload; its URLs and completion then fail, and the order stays unprocessed', async () => {
      const id = await newOrder(h);
      const uploadId = (await initiate(id)).json.upload_id as string;
      const [u] = (
        await h.call('POST', '/upload/multipart/presigned-urls', {
          token: t,
          json: { upload_id: uploadId, parts: 1 },
        })
      ).json.urls as { url: string }[];
      const abort = await h.call('POST', '/upload/multipart/abort', {
        token: t,
        json: { upload_id: uploadId },
      });
      expect(abort.json).toEqual({ upload_id: uploadId, aborted: true });
      expect((await putObject(u.url, Buffer.alloc(10, 1))).status).toBe(409);
      const complete = await h.call('POST', '/upload/multipart/complete', {
        token: t,
        json: { upload_id: uploadId, parts: [{ part_number: 1, etag: 'x' }] },
      });
      expect(complete.status).toBe(409);
      const again = await h.call('POST', '/upload/multipart/abort', {
        token: t,
        json: { upload_id: uploadId },
      });
      expect(again.status).toBe(409);
      const unknown = await h.call('POST', '/upload/multipart/abort', {
        token: t,
        json: { upload_id: '3b241101-e2bb-4255-8caf-4136c566a962' },
      });
      expect(unknown.status).toBe(404);
      await h.sandbox.advance(10 * MINUTE);
      expect(await statusOf(h, id)).toBe('PENDING');
    });

    it('leaves an order whose upload is never completed unprocessed, and caps concurrent uploads (429)', async () => {
      const ids = await Promise.all([newOrder(h), newOrder(h), newOrder(h), newOrder(h)]);
      const opened = [];
      for (const id of ids.slice(0, 3)) opened.push((await initiate(id)).json.upload_id as string);
      const fourth = await initiate(ids[3]);
      expect(fourth.status).toBe(429);
      expect(fourth.json.error).toBe('too_many_concurrent_uploads');
      expect(fourth.headers.get('retry-after')).toBeTruthy();
      await h.sandbox.advance(30 * MINUTE);
      expect(await statusOf(h, ids[0])).toBe('PENDING');
      for (const uploadId of opened)
        await h.call('POST', '/upload/multipart/abort', {
          token: t,
          json: { upload_id: uploadId },
        });
      const again = await initiate(ids[3]);
      expect(again.status).toBe(201);
      await h.call('POST', '/upload/multipart/abort', {
        token: t,
        json: { upload_id: again.json.upload_id },
      });
    });
  });

  it('stores nothing and frees the slot when a client breaks off a PUT mid-body', async () => {
    const id = await newOrder(h);
    const url = new URL(await singlePutUrl(h, id));
    await new Promise<void>((resolve) => {
      const req = request(url, {
        method: 'PUT',
        headers: { 'content-length': String(1024 * 1024) },
      });
      req.on('error', () => resolve());
      req.write(Buffer.alloc(100 * 1024, 1), () => setTimeout(() => req.destroy(), 50));
      req.on('close', () => resolve());
    });
    for (let i = 0; i < 50 && h.sandbox.state.activeUploads('org-a') > 0; i++)
      await new Promise((r) => setTimeout(r, 20));
    expect(h.sandbox.state.activeUploads('org-a')).toBe(0);
    expect(await readdir(join(h.sandbox.dataRoot, 'tmp'))).toEqual([]);
    expect(await statusOf(h, id)).toBe('PENDING');
    await uploadSingle(h, id, createMrBrainSeries({ series: { slices: 1 } })[0].bytes);
    expect(await statusOf(h, id)).toBe('RECEIVED');
  });

  it('ends the open multipart uploads of a cancelled order, freeing their slots', async () => {
    const id = await newOrder(h);
    const uploadId = (
      await h.call('POST', '/upload/multipart/initiate', { token: t, json: { order_id: id } })
    ).json.upload_id as string;
    const [u] = (
      await h.call('POST', '/upload/multipart/presigned-urls', {
        token: t,
        json: { upload_id: uploadId, parts: 1 },
      })
    ).json.urls as { url: string }[];
    expect(
      (await h.call('PATCH', '/cancel-order', { token: t, query: { order_id: id } })).status,
    ).toBe(200);
    expect((await putObject(u.url, Buffer.alloc(10, 1))).status).toBe(409);
    expect(
      (await h.call('POST', '/upload/multipart/abort', { token: t, json: { upload_id: uploadId } }))
        .status,
    ).toBe(409);
    expect(h.sandbox.state.uploads.get(uploadId)!.state).toBe('aborted');
    expect(h.sandbox.state.activeUploads('org-a')).toBe(0);
  });

  describe('same study uploaded again, and single instances', () => {
    it('overwrites an upload of the same StudyInstanceUID within 5 minutes: the earlier order returns to PENDING', async () => {
      const series = createMrBrainSeries({ series: { slices: 1 } });
      const first = await newOrder(h, { sandbox_outcome: 'in_review' });
      await uploadSingle(h, first, series[0].bytes);
      await h.sandbox.advance(2 * SECOND);
      expect(await statusOf(h, first)).toBe('ELIGIBILITY_CHECK_RUNNING');
      const second = await newOrder(h, { sandbox_outcome: 'in_review' });
      await h.sandbox.advance(2 * MINUTE);
      await uploadSingle(h, second, series[0].bytes);
      expect(await statusOf(h, first)).toBe('PENDING');
      expect(await statusOf(h, second)).toBe('RECEIVED');
      const activity = (await h.call('GET', '/recent-activity', { token: t })).json.activity as {
        orderId: string;
        failureReason: string | null;
      }[];
      expect(activity.find((a) => a.orderId === first)!.failureReason).toMatch(/overwritten/);
      // The study UID now addresses the newest order.
      const byUid = await h.call('GET', '/status', {
        token: t,
        query: { study_uid: series[0].studyInstanceUid },
      });
      expect(byUid.json.order_id).toBe(second);
    });

    it('restarts processing when the same order re-uploads its study within 5 minutes, and refuses a re-upload after that', async () => {
      const [instance] = createMrBrainSeries({ series: { slices: 1 } });
      const id = await newOrder(h, { sandbox_outcome: 'in_review' });
      await uploadSingle(h, id, instance.bytes);
      await h.sandbox.advance(4 * SECOND);
      expect(await statusOf(h, id)).not.toBe('RECEIVED');
      await uploadSingle(h, id, instance.bytes);
      expect(await statusOf(h, id)).toBe('RECEIVED');
      await h.sandbox.advance(6 * MINUTE);
      const late = await putObject(await singlePutUrl(h, id), instance.bytes);
      expect(late.status).toBe(409);
      expect(late.json.error).toBe('order_already_uploaded');
    });

    it('does not overwrite after 5 minutes: both orders process', async () => {
      const [instance] = createMrBrainSeries({ series: { slices: 1 } });
      const a = await newOrder(h, { sandbox_outcome: 'in_review' });
      await uploadSingle(h, a, instance.bytes);
      await h.sandbox.advance(5 * MINUTE + SECOND);
      const b = await newOrder(h, { sandbox_outcome: 'in_review' });
      await uploadSingle(h, b, instance.bytes);
      expect(await statusOf(h, a)).toBe('IN_REVIEW');
      expect(await statusOf(h, b)).toBe('RECEIVED');
    });

    it('joins single instances (legacy GET /upload) arriving at most 1 minute apart, then processes them together', async () => {
      const series = createMrBrainSeries({ series: { slices: 3 } });
      const id = await newOrder(h, { sandbox_outcome: 'in_review' });
      const url = async (): Promise<string> =>
        (await h.call('GET', '/upload', { token: await h.token(), query: { order_id: id } })).json
          .url as string;
      expect((await putObject(await url(), series[0].bytes)).status).toBe(200);
      await h.sandbox.advance(50 * SECOND);
      expect((await putObject(await url(), series[1].bytes)).status).toBe(200);
      await h.sandbox.advance(55 * SECOND);
      expect(await statusOf(h, id)).toBe('PENDING');
      expect((await putObject(await url(), series[2].bytes)).status).toBe(200);
      const otherStudy = createMrBrainSeries({ series: { slices: 1 } });
      const mismatch = await putObject(await url(), otherStudy[0].bytes);
      expect(mismatch.status).toBe(400);
      expect(mismatch.json.error).toBe('study_uid_mismatch');
      await h.sandbox.advance(59 * SECOND);
      expect(await statusOf(h, id)).toBe('PENDING');
      await h.sandbox.advance(1 * SECOND);
      expect(await statusOf(h, id)).toBe('RECEIVED');
      await h.sandbox.advance(4 * SECOND);
      const info = await h.call('GET', '/qc-report', {
        token: t,
        query: { order_id: id, report_type: 'additional_info' },
      });
      expect((info.json.acquisition as { instance_count: number }).instance_count).toBe(3);
      expect(await historyOf(h, id)).toEqual([
        'PENDING',
        'RECEIVED',
        'QUEUED',
        'ELIGIBILITY_CHECK_RUNNING',
        'QC_PASSED',
      ]);
      // Once processed and past the overwrite window, a further instance is refused at once.
      await h.sandbox.advance(6 * MINUTE);
      const late = await putObject(await url(), series[0].bytes);
      expect(late.status).toBe(409);
      expect(late.json.error).toBe('order_already_uploaded');
    });
  });
});
