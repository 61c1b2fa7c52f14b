import { exitWithin, spawnAdapter } from '../helpers/adapter-process';

const TOKENS = 'admin:typo-test-admin-token-1,sender:typo-test-sender-token1';

describe('a variable within a typo of a setting stops the start', () => {
  it('MLLP_PORTT, DATABASE_URI and a lower-case mllp_host are named with the setting meant', async () => {
    // Before, each was ignored: the MLLP listener came up on the default 2575 and an embedded
    // database was started instead of the hospital's, with nothing said.
    const proc = spawnAdapter({
      MLLP_PORTT: '2576',
      DATABASE_URI: 'postgres://adapter@db.example.org:5432/adapter',
      mllp_host: '10.1.2.3',
      API_TOKENS: TOKENS,
      HTTP_PORT: '0',
    });
    const { code } = await exitWithin(proc, 30_000);
    expect(code).toBe(2);
    expect(proc.output().trim().split('\n')).toEqual([
      'imaging-ai-adapter: MLLP_PORTT: not a setting of this adapter (it is not read); did you mean MLLP_PORT?',
      'imaging-ai-adapter: DATABASE_URI: not a setting of this adapter (it is not read); did you mean DATABASE_URL?',
      'imaging-ai-adapter: mllp_host: not a setting of this adapter (it is not read); did you mean MLLP_HOST?',
    ]);
  });

  it('variables further from any setting (a proxy, Kubernetes service links), or near one that is set, are left alone', async () => {
    const proc = spawnAdapter({
      HTTP_PROXY: 'http://proxy.example.org:3128',
      https_proxy: 'http://proxy.example.org:3128',
      MLLP_SERVICE_HOST: '10.96.0.12',
      MLLP_SERVICE_PORT: '2575',
      MLLP_PORT_2575_TCP: 'tcp://10.96.0.12:2575',
      NODE_VERSION: '24.11.1',
      // a host's own variable one letter from a setting that is itself set: nothing defaults
      HTTPS_PORT: '8443',
      API_TOKENS: TOKENS,
      HTTP_PORT: 'abc',
    });
    const { code } = await exitWithin(proc, 30_000);
    expect(code).toBe(2);
    expect(proc.output().trim()).toBe(
      'imaging-ai-adapter: HTTP_PORT: must be a port number (got "abc")',
    );
  });
});
