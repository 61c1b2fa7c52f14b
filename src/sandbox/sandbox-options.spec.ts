import {
  DEFAULT_CLIENT,
  defaultSandboxOptions,
  parseSandboxEnv,
  validateFaultConfig,
} from './sandbox-options';

describe('parseSandboxEnv', () => {
  it('uses the documented defaults when nothing is set', () => {
    const r = parseSandboxEnv({});
    expect(r).toEqual({ ok: true, options: {} });
    const d = defaultSandboxOptions();
    expect(d).toMatchObject({
      port: 8090,
      host: '127.0.0.1',
      dataDir: '.data/sandbox',
      rateLimitPerEndpoint: 600,
      rateLimitPerIp: 2000,
      retired: false,
      // The contract's answers: one list, the whole organization's reports.
      pageSize: null,
      reportsPerUser: false,
    });
    expect(d.clients).toEqual([DEFAULT_CLIENT]);
    expect(DEFAULT_CLIENT).toEqual({
      clientId: 'sandbox-client',
      clientSecret: 'sandbox-secret',
      organizationId: 'sandbox-org',
      role: 'org_admin',
      scopes: ['read', 'write'],
    });
    expect(d.signingKey.equals(defaultSandboxOptions().signingKey)).toBe(false); // random per start
  });

  it('reads every variable', () => {
    const r = parseSandboxEnv({
      SANDBOX_PORT: '9001',
      SANDBOX_HOST: '0.0.0.0',
      SANDBOX_CLIENTS: JSON.stringify([
        {
          client_id: 'c1',
          client_secret: 's1',
          organization_id: 'o1',
          role: 'user',
          scopes: ['read'],
        },
      ]),
      SANDBOX_TIME_SCALE: '0.01',
      SANDBOX_DATA_DIR: '/tmp/x',
      SANDBOX_RATE_LIMIT_PER_ENDPOINT: '10',
      SANDBOX_RATE_LIMIT_PER_IP: '20',
      SANDBOX_DEPRECATION_DATE: '2027-01-31',
      SANDBOX_RETIRED: 'true',
      SANDBOX_MIGRATION_GUIDE_URL: 'https://example.test/migrate',
      SANDBOX_FAULTS: '{"seed":3,"*":{"error5xx":0.1},"/new-order":{"drop":0.5}}',
      SANDBOX_SIGNING_KEY: 'a-signing-key-of-enough-length',
      SANDBOX_PUBLIC_ORIGIN: 'http://sandbox:8090',
      SANDBOX_PAGE_SIZE: '25',
      SANDBOX_PAGE_STYLE: 'cursor',
      SANDBOX_REPORTS_PER_USER: 'true',
    });
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.options).toMatchObject({
      port: 9001,
      host: '0.0.0.0',
      clients: [
        {
          clientId: 'c1',
          clientSecret: 's1',
          organizationId: 'o1',
          role: 'user',
          scopes: ['read'],
        },
      ],
      timeScale: 0.01,
      dataDir: '/tmp/x',
      rateLimitPerEndpoint: 10,
      rateLimitPerIp: 20,
      deprecationDate: '2027-01-31',
      retired: true,
      migrationGuideUrl: 'https://example.test/migrate',
      faults: { seed: 3, endpoints: { '*': { error5xx: 0.1 }, '/new-order': { drop: 0.5 } } },
      publicOrigin: 'http://sandbox:8090',
      pageSize: 25,
      pageStyle: 'cursor',
      reportsPerUser: true,
    });
    expect(r.options.signingKey?.toString()).toBe('a-signing-key-of-enough-length');
  });

  it('reports one line per bad variable', () => {
    const r = parseSandboxEnv({
      SANDBOX_PORT: 'eighty',
      SANDBOX_CLIENTS: '[{"client_id":"x","client_secret":"","organization_id":"o","role":"boss"}]',
      SANDBOX_TIME_SCALE: '-1',
      SANDBOX_RATE_LIMIT_PER_ENDPOINT: '0',
      SANDBOX_RATE_LIMIT_PER_IP: '1.5',
      SANDBOX_DEPRECATION_DATE: '31.01.2027',
      SANDBOX_RETIRED: 'yes',
      SANDBOX_MIGRATION_GUIDE_URL: 'not a url',
      SANDBOX_FAULTS: '{"*":{"error5xx":2}}',
      SANDBOX_SIGNING_KEY: 'short',
      SANDBOX_PUBLIC_ORIGIN: 'http://sandbox:8090/v1',
      SANDBOX_PAGE_SIZE: '0',
      SANDBOX_PAGE_STYLE: 'offset',
      SANDBOX_REPORTS_PER_USER: 'maybe',
    });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    const names = r.errors.map((e) => e.split(/[:[]/)[0]);
    expect(names).toEqual([
      'SANDBOX_PORT',
      'SANDBOX_CLIENTS',
      'SANDBOX_CLIENTS',
      'SANDBOX_TIME_SCALE',
      'SANDBOX_RATE_LIMIT_PER_ENDPOINT',
      'SANDBOX_RATE_LIMIT_PER_IP',
      'SANDBOX_DEPRECATION_DATE',
      'SANDBOX_RETIRED',
      'SANDBOX_MIGRATION_GUIDE_URL',
      'SANDBOX_FAULTS',
      'SANDBOX_SIGNING_KEY',
      'SANDBOX_PUBLIC_ORIGIN',
      'SANDBOX_PAGE_SIZE',
      'SANDBOX_PAGE_STYLE',
      'SANDBOX_REPORTS_PER_USER',
    ]);
    expect(r.errors[1]).toMatch(/client_secret/);
    expect(r.errors[2]).toMatch(/role/);
  });

  it('refuses malformed JSON and duplicate client ids', () => {
    const bad = parseSandboxEnv({ SANDBOX_CLIENTS: '[{', SANDBOX_FAULTS: '{' });
    expect(bad.ok).toBe(false);
    if (!bad.ok) expect(bad.errors).toHaveLength(2);
    const dup = parseSandboxEnv({
      SANDBOX_CLIENTS: JSON.stringify([
        { client_id: 'a', client_secret: 's', organization_id: 'o' },
        { client_id: 'a', client_secret: 's', organization_id: 'o' },
      ]),
    });
    expect(dup.ok).toBe(false);
  });
});

describe('validateFaultConfig', () => {
  it('refuses unknown fields and shares above 1, but allows slowMs in milliseconds', () => {
    expect(validateFaultConfig({ '*': { slowMs: 2000, slowShare: 0.5 } }).errors).toEqual([]);
    expect(validateFaultConfig({ '*': { explode: 1 } }).errors[0]).toMatch(
      /unknown field "explode"/,
    );
    expect(validateFaultConfig({ '*': { drop: 1.5 } }).errors[0]).toMatch(/between 0 and 1/);
    expect(validateFaultConfig([]).errors).toHaveLength(1);
    expect(validateFaultConfig({ seed: 'x' }).errors[0]).toMatch(/seed/);
  });
});
