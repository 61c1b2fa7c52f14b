import { dedupeQuirks } from './quirks';
import { recordRefusal } from './refusal';

describe('recordRefusal', () => {
  it('keeps the refused input and says so', async () => {
    const kept: string[] = [];
    const errors: unknown[][] = [];
    const stored = await recordRefusal(
      { recordRejected: async (input: string) => void kept.push(input) },
      'raw message',
      { error: (...args: unknown[]) => void errors.push(args) },
      'refused thing',
    );
    expect(stored).toBe(true);
    expect(kept).toEqual(['raw message']);
    expect(errors).toEqual([]);
  });

  it('logs a failure to store it and never throws (the sender still gets its refusal)', async () => {
    const errors: unknown[][] = [];
    const stored = await recordRefusal(
      { recordRejected: () => Promise.reject(new Error('database down')) },
      'raw message',
      { error: (...args: unknown[]) => void errors.push(args) },
      'refused thing',
    );
    expect(stored).toBe(false);
    expect(errors).toEqual([[{ err: 'database down' }, 'refused thing could not be stored']]);
  });
});

describe('dedupeQuirks', () => {
  it('keeps the first of each code and detail, in order', () => {
    expect(
      dedupeQuirks([
        { code: 'a', detail: 'x' },
        { code: 'b', detail: 'x' },
        { code: 'a', detail: 'x' },
        { code: 'a', detail: 'y' },
      ]),
    ).toEqual([
      { code: 'a', detail: 'x' },
      { code: 'b', detail: 'x' },
      { code: 'a', detail: 'y' },
    ]);
  });
});
