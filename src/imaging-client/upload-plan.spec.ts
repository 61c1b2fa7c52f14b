import { LIMITS } from '../imaging-spec/imaging-spec';
import { ImagingClientError } from './imaging-client.error';
import { MIB, partRange, planUpload } from './upload-plan';

/**
 * Issue #17 items 1, 2, 7: the contract's "MB"/"GB" read so that a service counting either
 * decimal or binary units accepts every request: single PUT only under 5,000,000 bytes, parts
 * within [5 MiB, 100,000,000 bytes] (the last included, equal parts), at most 100 parts,
 * studies up to 10,000,000,000 bytes.
 */
function parts(size: number) {
  const plan = planUpload(size);
  if (plan.kind !== 'multipart') throw new Error('expected multipart');
  return Array.from({ length: plan.partCount }, (_, i) => partRange(plan, i + 1));
}

describe('planUpload', () => {
  it('uses a single PUT strictly below 5,000,000 bytes (safe under both readings of 5 MB)', () => {
    expect(planUpload(4_999_999)).toEqual({ kind: 'single', sizeBytes: 4_999_999 });
    expect(planUpload(1)).toEqual({ kind: 'single', sizeBytes: 1 });
  });

  it('from 5,000,000 bytes up to 5 MiB: multipart with one (last) part', () => {
    for (const size of [5_000_000, 5_242_879, 5 * MIB]) {
      expect(planUpload(size)).toEqual({
        kind: 'multipart',
        sizeBytes: size,
        partSizeBytes: size,
        partCount: 1,
      });
    }
  });

  it('10 MiB + 1 byte is two equal parts of at least 5 MiB, not 10 MiB plus a 1-byte part', () => {
    const r = parts(10 * MIB + 1);
    expect(r.map((p) => p.length)).toEqual([5 * MIB + 1, 5 * MIB]);
  });

  it.each([
    5_000_000,
    10 * MIB + 1,
    25 * MIB + 7,
    1000 * MIB,
    1001 * MIB,
    7 * 1024 * MIB + 3,
    10_000_000_000,
  ])(
    '%i bytes: every part within [5 MiB, 100,000,000], at most 100 parts, the file covered once',
    (size) => {
      const r = parts(size);
      expect(r.length).toBeLessThanOrEqual(LIMITS.multipartMaxParts);
      for (const [i, p] of r.entries()) {
        expect(p.length).toBeLessThanOrEqual(100_000_000);
        if (r.length > 1) expect(p.length).toBeGreaterThanOrEqual(5 * MIB);
        expect(p.start).toBe(i === 0 ? 0 : r[i - 1]!.end + 1);
      }
      expect(r.reduce((sum, p) => sum + p.length, 0)).toBe(size);
      expect(r.at(-1)!.end).toBe(size - 1);
    },
  );

  it('the maximum is the decimal 10 GB: exactly 100 parts of 100,000,000 bytes', () => {
    expect(planUpload(10_000_000_000)).toMatchObject({
      partSizeBytes: 100_000_000,
      partCount: 100,
    });
    // 10,000 MiB is more than 10 GB read decimally: a service counting decimal units refuses it.
    expect(() => planUpload(10_000 * MIB)).toThrow(/maximum/);
  });

  it('refuses what exceeds 10,000,000,000 bytes, and empty files', () => {
    const code = (size: number) => {
      try {
        planUpload(size);
        return 'accepted';
      } catch (error) {
        return (error as ImagingClientError).code;
      }
    };
    expect(code(10_000_000_001)).toBe('too_large');
    expect(code(10 * 1024 * MIB)).toBe('too_large');
    expect(code(0)).toBe('invalid_input');
  });
});
