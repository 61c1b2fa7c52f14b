import { ImagingClientError } from './imaging-client.error';
import { MIB, partRange, planUpload } from './upload-plan';

describe('planUpload', () => {
  it('uses a single PUT strictly below 5 MiB', () => {
    expect(planUpload(5 * MIB - 1)).toEqual({ kind: 'single', sizeBytes: 5 * MIB - 1 });
    expect(planUpload(1)).toEqual({ kind: 'single', sizeBytes: 1 });
  });

  it('switches to multipart at exactly 5 MiB, with the recommended 10 MiB part', () => {
    expect(planUpload(5 * MIB)).toEqual({
      kind: 'multipart',
      sizeBytes: 5 * MIB,
      partSizeBytes: 10 * MIB,
      partCount: 1,
    });
    expect(planUpload(25 * MIB)).toMatchObject({ partSizeBytes: 10 * MIB, partCount: 3 });
  });

  it('keeps 10 MiB parts up to 1000 MiB, then grows them so 100 parts suffice', () => {
    expect(planUpload(1000 * MIB)).toMatchObject({ partSizeBytes: 10 * MIB, partCount: 100 });
    const gib = planUpload(1024 * MIB);
    expect(gib).toMatchObject({ partSizeBytes: Math.ceil((1024 * MIB) / 100), partCount: 100 });
    const big = planUpload(7 * 1024 * MIB + 3);
    if (big.kind !== 'multipart') throw new Error('expected multipart');
    expect(big.partCount).toBeLessThanOrEqual(100);
    expect(big.partSizeBytes).toBeLessThanOrEqual(100 * MIB);
  });

  it('accepts exactly 100 parts of 100 MiB', () => {
    expect(planUpload(100 * 100 * MIB)).toMatchObject({ partSizeBytes: 100 * MIB, partCount: 100 });
  });

  it('refuses what would need a 101st part or exceeds 10 GiB, and empty files', () => {
    const code = (size: number) => {
      try {
        planUpload(size);
        return 'accepted';
      } catch (error) {
        return (error as ImagingClientError).code;
      }
    };
    expect(code(100 * 100 * MIB + 1)).toBe('too_large');
    expect(code(10 * 1024 * MIB)).toBe('too_large');
    expect(code(10 * 1024 * MIB + 1)).toBe('too_large');
    expect(code(0)).toBe('invalid_input');
  });

  it('cuts parts that cover the file exactly once', () => {
    const plan = planUpload(25 * MIB + 7);
    if (plan.kind !== 'multipart') throw new Error('expected multipart');
    const ranges = Array.from({ length: plan.partCount }, (_, i) => partRange(plan, i + 1));
    expect(ranges[0]).toEqual({ start: 0, end: 10 * MIB - 1, length: 10 * MIB });
    expect(ranges[2]).toEqual({ start: 20 * MIB, end: 25 * MIB + 6, length: 5 * MIB + 7 });
    expect(ranges.reduce((sum, r) => sum + r.length, 0)).toBe(25 * MIB + 7);
  });
});
