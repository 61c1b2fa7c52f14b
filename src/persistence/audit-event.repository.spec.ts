import { scrubSecrets } from './audit-event.repository';

describe('audit detail scrubbing', () => {
  it('drops the query string of presigned URLs and redacts credential-named keys', () => {
    const detail = {
      endpoint: 'PUT upload part 3',
      url: 'https://storage.example.com/bucket/study.zip?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F20261121&X-Amz-Signature=ab12cd',
      azure: 'https://acct.blob.core.windows.net/c/b.zip?sv=2024-01-01&se=2026-11-22&sp=w&sig=Zm9v',
      plain: 'https://api.example.com/v1/orders/123?include=metadata',
      request: { headers: { Authorization: 'Bearer eyJhbGciOi', accept: 'application/json' } },
      client_secret: 'hunter2',
      status: 201,
      retries: [{ accessToken: 'abc', status: 401 }],
      lineage: [{ target: 'accessionNumber', source: 'OBR-18', value: 'ACC-1', ruleId: 'r' }],
    };
    // What is not named here (endpoint, plain, status, lineage) is kept as it was.
    expect(scrubSecrets(detail)).toEqual({
      ...detail,
      url: 'https://storage.example.com/bucket/study.zip?[redacted]',
      azure: 'https://acct.blob.core.windows.net/c/b.zip?[redacted]',
      request: { headers: { Authorization: '[redacted]', accept: 'application/json' } },
      client_secret: '[redacted]',
      retries: [{ accessToken: '[redacted]', status: 401 }],
    });
  });
});
