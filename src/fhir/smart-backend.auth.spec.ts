import { generateKeyPairSync, verify } from 'node:crypto';
import { signClientAssertion } from './smart-backend.auth';

describe('SMART Backend Services client assertion', () => {
  it.each([
    ['RS384', generateKeyPairSync('rsa', { modulusLength: 2048 })],
    ['ES384', generateKeyPairSync('ec', { namedCurve: 'P-384' })],
  ] as const)('%s: signed, with the claims backend-services.html asks for', (alg, keys) => {
    const now = new Date('2026-11-21T10:00:00Z');
    const jwt = signClientAssertion(
      { clientId: 'adapter', keyId: 'k1', alg },
      keys.privateKey,
      'https://ehr.example/token',
      now,
    );
    const [h, p, s] = jwt.split('.');
    expect(JSON.parse(Buffer.from(h!, 'base64url').toString())).toEqual({
      alg,
      typ: 'JWT',
      kid: 'k1',
    });
    const claims = JSON.parse(Buffer.from(p!, 'base64url').toString()) as Record<string, unknown>;
    expect(claims).toMatchObject({
      iss: 'adapter',
      sub: 'adapter',
      aud: 'https://ehr.example/token',
      exp: 1795255500,
    });
    expect(typeof claims.jti).toBe('string');
    const signature = Buffer.from(s!, 'base64url');
    const ok =
      alg === 'ES384'
        ? verify(
            'sha384',
            Buffer.from(`${h}.${p}`),
            { key: keys.publicKey, dsaEncoding: 'ieee-p1363' },
            signature,
          )
        : verify('sha384', Buffer.from(`${h}.${p}`), keys.publicKey, signature);
    expect(ok).toBe(true);
    expect(
      verify(
        'sha384',
        Buffer.from(`${h}.${p}x`),
        alg === 'ES384' ? { key: keys.publicKey, dsaEncoding: 'ieee-p1363' } : keys.publicKey,
        signature,
      ),
    ).toBe(false);
  });
});
