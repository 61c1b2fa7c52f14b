import { failureReason } from './failure-reason';

describe('failureReason: fixed words and codes, never the free text of an answer', () => {
  it.each([
    [{ answer: 'the EHR answered 503 to Task', detail: { httpStatus: 503 } }, 'HTTP 503'],
    [{ answer: 'HTTP 429', detail: { status: 429 } }, 'HTTP 429'],
    [
      {
        answer: 'ORU^R01 AE: refused by the RIS for now',
        detail: { ackCode: 'AE', text: 'DOE^JANE unknown' },
      },
      'ACK AE',
    ],
    [
      {
        answer: 'ORU^R01 not acknowledged: ECONNREFUSED',
        detail: { error: 'connect ECONNREFUSED 10.1.2.3:2575' },
      },
      'ECONNREFUSED',
    ],
    [
      {
        answer: 'the PACS could not be reached (TypeError)',
        detail: { error: 'fetch failed https://user:pw@pacs.example/x' },
      },
      'delivery failed',
    ],
    [
      { answer: 'the alert webhook could not be reached (UND_ERR_SOCKET)', detail: {} },
      'UND_ERR_SOCKET',
    ],
    [{ answer: 'no usable answer from the EHR to Task: TimeoutError', detail: {} }, 'timeout'],
    [
      { answer: 'Task failed R4 validation (2 issue(s)); not sent', detail: {} },
      'refused before sending',
    ],
  ])('%j → %s', (result, expected) => {
    expect(failureReason(result)).toBe(expected);
  });
});
