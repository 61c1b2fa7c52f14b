import { createHash } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { fromBuffer, type Entry, type ZipFile } from 'yauzl';
import { readFile } from 'node:fs/promises';
import { request } from 'undici';
import { TEST_TOKENS } from '../helpers/adapter';

/** Shared helpers of the study acquisition suites (not a test file). */

/** A placed order row, as the lifecycle leaves it while it waits for the study. */
export async function insertOrder(
  ds: DataSource,
  ids: { studyInstanceUid?: string | null; accessionNumber?: string | null; state?: string },
): Promise<string> {
  const rows = (await ds.query(
    `INSERT INTO orders (source, state, request, accession_number, study_instance_uid)
     VALUES ('api', $1, '{}'::jsonb, $2, $3) RETURNING id`,
    [ids.state ?? 'placed', ids.accessionNumber ?? null, ids.studyInstanceUid ?? null],
  )) as Array<{ id: string }>;
  return rows[0]!.id;
}

export function sha256(data: Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

/** Reads a whole ZIP back with yauzl: entry name → bytes. */
export async function readZip(path: string): Promise<Map<string, Buffer>> {
  const data = await readFile(path);
  const zip = await new Promise<ZipFile>((resolve, reject) =>
    fromBuffer(data, { lazyEntries: true }, (err, z) => (err ? reject(err) : resolve(z))),
  );
  const out = new Map<string, Buffer>();
  await new Promise<void>((resolve, reject) => {
    zip.on('entry', (entry: Entry) => {
      zip.openReadStream(entry, (err, stream) => {
        if (err) return reject(err);
        const chunks: Buffer[] = [];
        stream.on('data', (c: Buffer) => chunks.push(c));
        stream.on('end', () => {
          out.set(entry.fileName, Buffer.concat(chunks));
          zip.readEntry();
        });
        stream.on('error', reject);
      });
    });
    zip.on('end', () => resolve());
    zip.on('error', reject);
    zip.readEntry();
  });
  return out;
}

export interface MultipartPart {
  contentType?: string;
  data: Buffer;
}

/** A multipart/related body as a STOW-RS client (e.g. dcm4che's stowrs, or DCMTK) sends it. */
export function multipartRelated(
  parts: MultipartPart[],
  boundary = `DICOMwebBoundary${Date.now().toString(16)}`,
): { body: Buffer; contentType: string } {
  const chunks: Buffer[] = [];
  for (const p of parts) {
    chunks.push(
      Buffer.from(
        `--${boundary}\r\nContent-Type: ${p.contentType ?? 'application/dicom'}\r\nContent-Length: ${p.data.length}\r\n\r\n`,
      ),
      p.data,
      Buffer.from('\r\n'),
    );
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return {
    body: Buffer.concat(chunks),
    contentType: `multipart/related; type="application/dicom"; boundary=${boundary}`,
  };
}

/**
 * Pushes instances to a running adapter's STOW-RS endpoint as a sending modality does (one
 * multipart/related body, the sender's token); the answer's status and its body (DICOM JSON
 * or problem JSON, undefined when empty).
 */
export async function stowToAdapter(
  httpUrl: string,
  instances: Array<Buffer | { bytes: Buffer }>,
): Promise<{ status: number; json: unknown }> {
  const { body, contentType } = multipartRelated(
    instances.map((i) => ({
      contentType: 'application/dicom',
      data: Buffer.isBuffer(i) ? i : i.bytes,
    })),
  );
  const res = await request(`${httpUrl}/dicomweb/studies`, {
    method: 'POST',
    headers: {
      'content-type': contentType,
      accept: 'application/dicom+json',
      authorization: `Bearer ${TEST_TOKENS.sender}`,
    },
    body,
  });
  const text = await res.body.text();
  return { status: res.statusCode, json: text ? (JSON.parse(text) as unknown) : undefined };
}
