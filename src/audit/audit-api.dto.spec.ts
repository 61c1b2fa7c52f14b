import { AppError } from '../common/app-error';
import { messageBrowseSchema, orderSearchSchema, parseInput } from './audit-api.dto';

/** The search's time filters: ISO 8601 days of the calendar, UTC unless they name an offset. */
describe('audit search time filters', () => {
  const from = (value: string) => parseInput(orderSearchSchema, { from: value }).from;

  it.each([
    ['2026-11-25', '2026-11-25T00:00:00.000Z'],
    ['2024-02-29', '2024-02-29T00:00:00.000Z'],
    ['2026-03-29T02:30', '2026-03-29T02:30:00.000Z'],
    ['2026-10-25 02:30:15', '2026-10-25T02:30:15.000Z'],
    ['2026-03-29T02:30+02:00', '2026-03-29T00:30:00.000Z'],
    ['2026-11-25T10:00+0100', '2026-11-25T09:00:00.000Z'],
    ['2000-12-31T23:59:59.999Z', '2000-12-31T23:59:59.999Z'],
    ['2026-11-25T10:00:00.123000Z', '2026-11-25T10:00:00.123Z'],
    ['2026-11-25T10:00:00.5000000', '2026-11-25T10:00:00.500Z'],
  ])('%s is %s', (value, instant) => {
    expect(from(value)?.toISOString()).toBe(instant);
  });

  it.each([
    '2026-02-30',
    '2026-02-29',
    '2026-04-31T10:00',
    '1900-02-29',
    '2026-00-10',
    '2026-11-00',
    '2026-11-25T10:60',
    '2026-11-25T10:00+99:99',
    '25.11.2026',
  ])('%s is refused with 400, never read as another day', (value) => {
    let error: unknown;
    try {
      from(value);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(AppError);
    expect((error as AppError).message).toBe(
      'from: must be an ISO 8601 date or date-time (UTC unless it names an offset)',
    );
    expect(() => parseInput(messageBrowseSchema, { to: value })).toThrow(
      'to: must be an ISO 8601 date or date-time',
    );
  });

  // A Date holds milliseconds: `…00.0005` was cut to `…00.000`, so `from` took in rows from
  // before it and `to` left out rows before it, and a range of a microsecond was refused as
  // "from …00.000Z to …00.000Z: no time between".
  it.each([
    '2026-11-25T10:00:00.0005Z',
    '2026-11-25T10:00:00.123456',
    '2026-11-25 10:00:00.000000001+01:00',
  ])('%s (finer than a millisecond) is refused, never cut', (value) => {
    expect(() => from(value)).toThrow(
      'from: must not be finer than a millisecond (at most 3 digits after the second)',
    );
    expect(() => parseInput(messageBrowseSchema, { to: value })).toThrow(
      'to: must not be finer than a millisecond',
    );
  });
});
