import { movesBackwards } from './upstream-status-order';

describe('upstream status order', () => {
  it.each([
    ['QC_BYPASS', 'QC_FAILED'],
    ['ANALYSIS_RUNNING', 'QUEUED'],
    ['PREPROCESSING', 'QC_FAILED'],
    ['IN_REVIEW', 'PREPROCESSING'],
    ['IN_REVIEW', 'QUEUED'],
    ['QC_PASSED', 'ELIGIBILITY_CHECK_RUNNING'],
    ['RECEIVED', 'PENDING'],
  ] as const)('%s then %s moves backwards', (applied, next) => {
    expect(movesBackwards(applied, next)).toBe(true);
  });

  it.each([
    ['QC_FAILED', 'QC_BYPASS'],
    ['QC_FAILED', 'QC_FAILED'],
    ['QC_FAILED', 'PREPROCESSING'],
    ['QC_BYPASS', 'QC_PASSED'],
    ['PENDING', 'DELIVERED'],
    ['IN_REVIEW', 'DELIVERED'],
    ['IN_REVIEW', 'ANALYSIS_RUNNING'],
    ['ANALYSIS_RUNNING', 'IN_REVIEW'],
    ['ANALYSIS_RUNNING', 'CANCELLED'],
    ['QC_FAILED', 'EXPIRED'],
    [null, 'QUEUED'],
    ['VENDOR_REVIEW_HOLD', 'QUEUED'],
  ] as const)('%s then %s does not', (applied, next) => {
    expect(movesBackwards(applied, next)).toBe(false);
  });
});
