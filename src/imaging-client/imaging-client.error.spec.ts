import { codeForStatus, ImagingClientError, sanitizeText } from './imaging-client.error';

describe('ImagingClientError', () => {
  it('names the operation and never carries a signed URL', () => {
    const signed =
      'https://bucket.s3.amazonaws.com/uploads/abc?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=deadbeef&X-Amz-Expires=3600';
    const error = new ImagingClientError('forbidden', 'upload-part', `storage refused ${signed}`, {
      status: 403,
      upstreamError: {
        error: 'AccessDenied',
        message: `expired ${signed}`,
        url: signed,
        nested: [{ u: signed }],
      },
    });
    const text = JSON.stringify(error.toJSON()) + error.message;
    expect(text).not.toContain('deadbeef');
    expect(text).not.toContain('X-Amz-Signature=d');
    expect(error.message.startsWith('upload-part: ')).toBe(true);
    expect(error.code).toBe('forbidden');
    expect(error.transient).toBe(false);
  });

  it('masks signature-like parameters even outside a full URL', () => {
    expect(sanitizeText('retry with sig=abc123&X-Amz-Credential=AKIA')).toBe(
      'retry with sig=[redacted]&X-Amz-Credential=[redacted]',
    );
  });

  it('maps statuses to codes', () => {
    expect([302, 400, 401, 403, 404, 409, 410, 418, 429, 503].map(codeForStatus)).toEqual([
      'redirected',
      'bad_request',
      'unauthorized',
      'forbidden',
      'not_found',
      'conflict',
      'retired',
      'client_error',
      'rate_limited_exhausted',
      'server_error_exhausted',
    ]);
  });
});
