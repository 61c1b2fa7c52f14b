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

describe('presigned upload URLs naming this machine or a metadata service', () => {
  const https = { baseUrl: 'https://api.imaging.example/v1' };

  it.each([
    ['the cloud metadata service', 'https://169.254.169.254/latest/meta-data/', /link-local/],
    ['the metadata service, written as one number', 'https://2852039166/x', /link-local/],
    ['the GCP metadata name', 'https://metadata.google.internal/x', /link-local/],
    ['the AWS IPv6 metadata service', 'https://[fd00:ec2::254]/x', /link-local/],
    ['an IPv6 link-local address', 'https://[fe80::1]/x', /link-local/],
    ['localhost', 'https://localhost:5432/x', /loopback/],
    ['a name under localhost', 'https://db.localhost/x', /loopback/],
    ['127.0.0.1 in hex', 'https://0x7f.0.0.1:6379/x', /loopback/],
    ['IPv6 loopback', 'https://[::1]:8080/x', /loopback/],
    ['IPv4-mapped loopback', 'https://[::ffff:127.0.0.1]/x', /loopback/],
    ['the unspecified address', 'https://0.0.0.0:8080/x', /unspecified/],
    // A fully qualified name (trailing dot) is the same host to DNS: on GCP the metadata
    // name resolves either way, and systemd-resolved answers `localhost.` with 127.0.0.1.
    ['the GCP metadata name, fully qualified', 'https://metadata.google.internal./x', /link-local/],
    ['localhost, fully qualified', 'https://localhost.:5432/x', /loopback/],
    ['a name under localhost, fully qualified', 'https://db.localhost../x', /loopback/],
  ])('refuses %s when no IMAGING_UPLOAD_HOSTS names it', (_why, url, message) => {
    expect(() => checkStorageUrl(url, https, 'upload')).toThrow(message);
  });

  it('takes loopback when the upstream is on loopback, and any host the site lists', () => {
    const local = { baseUrl: 'http://127.0.0.1:4010/v1' };
    expect(checkStorageUrl('http://127.0.0.1:4011/put', local, 'u')).toBe('127.0.0.1:4011');
    expect(() => checkStorageUrl('http://169.254.169.254/put', local, 'u')).toThrow(/link-local/);
    expect(
      checkStorageUrl(
        'https://localhost:9000/put',
        { ...https, uploadHosts: ['localhost:9000'] },
        'u',
      ),
    ).toBe('localhost:9000');
    // Private addresses are ordinary storage hosts (an on-site object store).
    expect(checkStorageUrl('https://10.1.2.3/put', https, 'u')).toBe('10.1.2.3');
  });
});
