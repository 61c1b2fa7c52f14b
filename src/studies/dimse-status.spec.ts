import { checkRetrieveOutcome, statusError } from './dimse-status';
import type { StudyError } from './study.error';

/** How DIMSE statuses (PS3.4 Annex C, PS3.7 Annex C) become waiting or failed. */
describe('DIMSE retrieve statuses', () => {
  const outcome = (status: number, completed = 3, failed = 0, warnings = 0) => ({
    status,
    completed,
    failed,
    warnings,
  });
  const thrown = (fn: () => void): StudyError => {
    try {
      fn();
    } catch (error) {
      return error as StudyError;
    }
    throw new Error('nothing thrown');
  };

  it('accepts success with every sub-operation completed', () => {
    expect(() => checkRetrieveOutcome('C-MOVE', outcome(0x0000))).not.toThrow();
  });

  it.each([
    ['0xA701', 0xa701, /0xA701 \(out of resources\)/],
    ['0xA702', 0xa702, /0xA702 \(out of resources\)/],
    ['0xA801', 0xa801, /0xA801 \(move destination unknown: the PACS does not know our AE title\)/],
    ['0xC000', 0xc000, /0xC000 \(unable to process\)/],
    ['0xFE00', 0xfe00, /0xFE00 \(cancelled\)/],
  ])('waits on %s (an operator or time fixes it)', (_name, status, reason) => {
    const error = thrown(() => checkRetrieveOutcome('C-MOVE', outcome(status, 0)));
    expect(error).toMatchObject({ code: 'pacs_unavailable', transient: true });
    expect(error.message).toMatch(reason);
  });

  it('waits on 0xB000 and on any failed sub-operation, naming the counts: never packaged', () => {
    const warning = thrown(() => checkRetrieveOutcome('C-GET', outcome(0xb000, 7, 2, 1)));
    expect(warning).toMatchObject({ transient: true });
    expect(warning.message).toBe(
      'C-GET incomplete: 2 of 10 sub-operation(s) failed (status 0xB000); not packaged',
    );
    // A PACS that reports success but counts a failure is not believed either.
    expect(thrown(() => checkRetrieveOutcome('C-MOVE', outcome(0x0000, 2, 1)))).toMatchObject({
      transient: true,
    });
  });

  it('fails on requests the PACS cannot serve at all', () => {
    expect(statusError('C-FIND', 0xa900)).toMatchObject({ code: 'pacs_error', transient: false });
    const noGet = statusError('C-GET', 0x0122);
    expect(noGet).toMatchObject({ transient: false });
    expect(noGet.message).toMatch(/SOP class not supported.*PACS_DIMSE_RETRIEVE=move/);
  });
});
