import { DEFAULT_CLIENT } from '../../src/sandbox/sandbox-options';
import { ImagingClientError } from '../../src/imaging-client/imaging-client.error';
import { buildClient, startTestSandbox } from './sandbox-harness';

/**
 * Issue #17 item 3: client credentials in HTTP Basic. RFC 6749 §2.3.1 form-urlencodes the id
 * and secret before Base64 (our default); a service that takes plain RFC 7617 Basic needs them
 * as they are (IMAGING_BASIC_AUTH_ENCODING=raw). A secret with `+ / = : %` tells the two apart.
 * Both sides are real: the client over HTTP against the sandbox with the same switch.
 */
const SECRET = 'p+s/w=rd:50%off';
const client = { ...DEFAULT_CLIENT, clientId: 'client id+1', clientSecret: SECRET };

describe('Basic client credentials: rfc6749 (default) and raw', () => {
  it.each(['rfc6749', 'raw'] as const)('%s on both sides: a token is issued', async (encoding) => {
    const peer = await startTestSandbox({ clients: [client], basicAuthEncoding: encoding });
    const c = buildClient(peer.sandbox.baseUrl, {
      credentials: { clientId: client.clientId, clientSecret: SECRET },
      basicAuthEncoding: encoding,
    });
    try {
      await expect(c.client.getProducts()).resolves.toBeDefined();
    } finally {
      await c.close();
      await peer.close();
    }
  });

  it('raw credentials against an RFC 6749 service are refused (401 unauthorized), not mistaken', async () => {
    const peer = await startTestSandbox({ clients: [client], basicAuthEncoding: 'rfc6749' });
    const c = buildClient(peer.sandbox.baseUrl, {
      credentials: { clientId: client.clientId, clientSecret: SECRET },
      basicAuthEncoding: 'raw',
    });
    try {
      const error = await c.client.getProducts().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ImagingClientError);
      expect((error as ImagingClientError).code).toBe('unauthorized');
    } finally {
      await c.close();
      await peer.close();
    }
  });
});
