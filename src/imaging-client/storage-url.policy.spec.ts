import { ImagingClientError } from './imaging-client.error';
import { checkStorageUrl } from './storage-url.policy';

describe('presigned upload URLs are checked before any byte leaves', () => {
  const https = { baseUrl: 'https://api.imaging.example/v1' };

  it('accepts an https URL and returns its host for the audit log', () => {
    expect(
      checkStorageUrl(
        'https://bucket.s3.eu-central-1.amazonaws.com/org/study.zip?X-Amz-Signature=abc',
        https,
        'upload',
      ),
    ).toBe('bucket.s3.eu-central-1.amazonaws.com');
  });

  it.each([
    ['plain http under an https base', 'http://203.0.113.9:8080/put', /scheme http/],
    ['user information', 'https://user:pw@storage.example/put', /user information/],
    ['a non-http scheme', 'file:///etc/passwd', /scheme file/],
    ['a CR/LF', 'https://storage.example/put\r\nx: y', /control characters/],
    ['garbage', 'not-a-url', /not a URL/],
  ])('refuses %s', (_why, url, message) => {
    expect(() => checkStorageUrl(url, https, 'upload')).toThrow(message);
    try {
      checkStorageUrl(url, https, 'upload');
    } catch (error) {
      // Not retryable: a later attempt would get the same kind of URL.
      expect(error).toBeInstanceOf(ImagingClientError);
      expect((error as ImagingClientError).code).toBe('invalid_response');
    }
  });

  it('allows http only when the upstream base itself is http (the local sandbox)', () => {
    expect(
      checkStorageUrl(
        'http://127.0.0.1:4010/storage/put?sig=1',
        { baseUrl: 'http://127.0.0.1:4010/v1' },
        'upload',
      ),
    ).toBe('127.0.0.1:4010');
  });

  it('with IMAGING_UPLOAD_HOSTS, refuses every host not on the list', () => {
    const policy = {
      ...https,
      uploadHosts: ['storage.example', '*.s3.amazonaws.com', 'minio.local:9000'],
    };
    expect(checkStorageUrl('https://storage.example/a', policy, 'u')).toBe('storage.example');
    expect(checkStorageUrl('https://bucket.s3.amazonaws.com/a', policy, 'u')).toBe(
      'bucket.s3.amazonaws.com',
    );
    expect(checkStorageUrl('https://minio.local:9000/a', policy, 'u')).toBe('minio.local:9000');
    expect(() => checkStorageUrl('https://minio.local:9001/a', policy, 'u')).toThrow(
      /IMAGING_UPLOAD_HOSTS/,
    );
    expect(() => checkStorageUrl('https://s3.amazonaws.com.evil.example/a', policy, 'u')).toThrow(
      /IMAGING_UPLOAD_HOSTS/,
    );
    expect(() => checkStorageUrl('https://evil.example/a', policy, 'u')).toThrow(
      /IMAGING_UPLOAD_HOSTS/,
    );
  });
});
