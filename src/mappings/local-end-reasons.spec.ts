import {
  CLINICAL_CANCELLED,
  CLINICAL_END_REASONS,
  CLINICAL_FAILED_DEFAULT,
  clinicalEndReason,
} from './local-end-reasons';

describe('the clinical sentences of local ends', () => {
  const all = [...Object.values(CLINICAL_END_REASONS), CLINICAL_FAILED_DEFAULT, CLINICAL_CANCELLED];

  it.each(all)(
    '"%s" is plain words: no upstream codes, HTTP statuses, URLs or HL7 delimiters',
    (text) => {
      expect(text).not.toMatch(
        /\b[1-5]\d\d\b|https?:|[A-Z]{3,}_[A-Z]|[a-z]+_[a-z]+|upstream|attempt|error/,
      );
      expect(text).not.toMatch(/[|^~\\&\r\n\t]/);
      expect(text.length).toBeLessThanOrEqual(200);
    },
  );

  it('a failure says no result will come; a cancel says the orderer asked', () => {
    for (const alert of Object.keys(CLINICAL_END_REASONS)) {
      expect(clinicalEndReason('failed', alert)).toMatch(/no result will come/);
      expect(clinicalEndReason('cancelled', alert)).toBe(CLINICAL_CANCELLED);
    }
    // each says it whole: the composition puts it in place of the row's lead, not after it
    for (const text of all) expect(text).toMatch(/no result will come/);
    expect(clinicalEndReason('failed', null)).toBe(CLINICAL_FAILED_DEFAULT);
    expect(clinicalEndReason('failed', 'constructor')).toBe(CLINICAL_FAILED_DEFAULT);
    expect(clinicalEndReason('failed', 'some-new-alert')).toBe(CLINICAL_FAILED_DEFAULT);
  });
});
