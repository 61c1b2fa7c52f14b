import {
  baseMediaType,
  boundaryOf,
  mediaTypeParameter,
  readMultipart,
} from './multipart-related.parser';
import { StudyError } from './study.error';

async function* chunksOf(data: Buffer, sizes: number[]): AsyncGenerator<Buffer> {
  let at = 0;
  let i = 0;
  while (at < data.length) {
    const n = sizes[i++ % sizes.length]!;
    yield data.subarray(at, at + n);
    at += n;
  }
}

async function parts(
  source: AsyncIterable<Buffer>,
  boundary: string,
): Promise<Array<{ headers: Record<string, string>; body: Buffer }>> {
  const out: Array<{ headers: Record<string, string>; body: Buffer[] }> = [];
  for await (const e of readMultipart(source, boundary)) {
    if (e.type === 'part') out.push({ headers: e.headers, body: [] });
    else if (e.type === 'data') out[out.length - 1]!.body.push(e.chunk);
  }
  return out.map((p) => ({ headers: p.headers, body: Buffer.concat(p.body) }));
}

// Shaped like a WADO-RS answer (PS3.18 §8.6.1.2): CRLF line ends, a part per instance,
// binary bodies that contain CR, LF and dashes.
const BOUNDARY = 'b1a2c3-DICOMweb';
const BINARY = Buffer.from([0x0d, 0x0a, 0x2d, 0x2d, 0x62, 0x31, 0x00, 0xff, 0x0d, 0x0a, 0x2d]);
const BODY = Buffer.concat([
  Buffer.from('preamble that is ignored\r\n'),
  Buffer.from(`--${BOUNDARY}\r\nContent-Type: application/dicom\r\n\r\n`),
  BINARY,
  Buffer.from(
    `\r\n--${BOUNDARY}  \r\nContent-Type: application/dicom;\r\n transfer-syntax=1.2.840.10008.1.2.1\r\nContent-Location: /x\r\n\r\n`,
  ),
  Buffer.from(`not the end: --${BOUNDARY.slice(0, 5)} nor \r\n--${BOUNDARY.slice(0, -1)}x`),
  Buffer.from(`\r\n--${BOUNDARY}\r\n\r\n`),
  Buffer.from('part without headers'),
  Buffer.from(`\r\n--${BOUNDARY}--\r\nepilogue, ignored`),
]);

describe('readMultipart', () => {
  const expected = [
    { headers: { 'content-type': 'application/dicom' }, body: BINARY },
    {
      headers: {
        'content-type': 'application/dicom; transfer-syntax=1.2.840.10008.1.2.1',
        'content-location': '/x',
      },
      body: Buffer.from(
        `not the end: --${BOUNDARY.slice(0, 5)} nor \r\n--${BOUNDARY.slice(0, -1)}x`,
      ),
    },
    { headers: {}, body: Buffer.from('part without headers') },
  ];

  it('reads parts, folded headers, padding after a boundary, and ignores preamble and epilogue', async () => {
    expect(await parts(chunksOf(BODY, [BODY.length]), BOUNDARY)).toEqual(expected);
  });

  it('gives the same parts whatever the chunking (every split point, one byte at a time)', async () => {
    expect(await parts(chunksOf(BODY, [1]), BOUNDARY)).toEqual(expected);
    for (let cut = 1; cut < BODY.length; cut++) {
      const got = await parts(chunksOf(BODY, [cut, BODY.length]), BOUNDARY);
      expect(got).toEqual(expected);
    }
  });

  it('accepts a body that starts with the delimiter (no preamble)', async () => {
    const body = Buffer.from(`--${BOUNDARY}\r\n\r\nx\r\n--${BOUNDARY}--`);
    expect(await parts(chunksOf(body, [3]), BOUNDARY)).toEqual([
      { headers: {}, body: Buffer.from('x') },
    ]);
  });

  it('refuses bodies without a boundary or cut inside a part', async () => {
    await expect(parts(chunksOf(Buffer.from('just text'), [4]), BOUNDARY)).rejects.toThrow(
      new StudyError('bad_multipart', 'multipart body: no boundary found in the body'),
    );
    await expect(
      parts(chunksOf(BODY.subarray(0, BODY.length - 40), [7]), BOUNDARY),
    ).rejects.toThrow('the body ended inside a part');
    const junk = Buffer.from(`--${BOUNDARY}junk\r\n\r\nx\r\n--${BOUNDARY}--`);
    await expect(parts(chunksOf(junk, [100]), BOUNDARY)).rejects.toThrow(
      'unexpected characters after a boundary',
    );
  });
});

describe('media type helpers', () => {
  it('reads the boundary in token and quoted forms (RFC 2045 §5.1), refusing > 70 characters', () => {
    expect(boundaryOf('multipart/related; type="application/dicom"; boundary=abc')).toBe('abc');
    expect(boundaryOf('multipart/related;boundary="a b:c";type=application/dicom')).toBe('a b:c');
    expect(boundaryOf('multipart/related; BOUNDARY=XyZ')).toBe('XyZ');
    expect(boundaryOf(`multipart/related; boundary=${'x'.repeat(71)}`)).toBeUndefined();
    expect(boundaryOf('multipart/related')).toBeUndefined();
    expect(boundaryOf(undefined)).toBeUndefined();
  });

  it('reads parameters and the base type', () => {
    const ct = 'Multipart/Related; type="application/dicom"; transfer-syntax=*';
    expect(baseMediaType(ct)).toBe('multipart/related');
    expect(mediaTypeParameter(ct, 'type')).toBe('application/dicom');
    expect(mediaTypeParameter(ct, 'transfer-syntax')).toBe('*');
    expect(mediaTypeParameter(ct, 'charset')).toBeUndefined();
  });
});
