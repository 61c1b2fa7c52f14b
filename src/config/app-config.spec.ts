import { writeSiteFile } from '../../test/helpers/site-file';
import { ConfigError, describeConfig, loadConfig } from './app-config';

describe('loadConfig', () => {
  it('applies the documented defaults when nothing is set', () => {
    const c = loadConfig({});
    expect(c.HTTP_PORT).toBe(8080);
    expect(c.MLLP_PORT).toBe(2575);
    // nothing configured (the quick start): a faster poll and a short quiet period
    expect(c.POLL_INTERVAL_SECONDS).toBe(15);
    expect(c.STUDY_QUIET_PERIOD_SECONDS).toBe(5);
    expect(c.useEmbeddedDatabase).toBe(true);
    expect(c.useEmbeddedSandbox).toBe(true);
  });

  it('keeps the production poll and quiet period once a database is configured, or when set', () => {
    const c = loadConfig({ DATABASE_URL: 'postgres://db/x' });
    expect(c.POLL_INTERVAL_SECONDS).toBe(300);
    expect(c.STUDY_QUIET_PERIOD_SECONDS).toBe(60);
    expect(loadConfig({ POLL_INTERVAL_SECONDS: '300' }).POLL_INTERVAL_SECONDS).toBe(300);
  });

  it('lists every bad variable by name, one problem each', () => {
    let error: unknown;
    try {
      loadConfig({
        HTTP_PORT: 'abc',
        MLLP_PORT: '70000',
        DATABASE_URL: 'mysql://db/x',
        POLL_INTERVAL_SECONDS: '0',
        API_TOKENS: 'root:abcdefabcdefabcdef',
      });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const problems = (error as ConfigError).problems;
    expect(problems).toHaveLength(5);
    expect(problems.map((p) => p.split(':')[0]).sort()).toEqual(
      ['API_TOKENS', 'DATABASE_URL', 'HTTP_PORT', 'MLLP_PORT', 'POLL_INTERVAL_SECONDS'].sort(),
    );
    expect(problems.join('\n')).not.toContain('abcdefabcdefabcdef');
  });

  it('configures a DIMSE PACS with host, port and AE title together; C-MOVE needs our SCP', () => {
    const problemsOf = (env: Record<string, string>) => {
      try {
        loadConfig(env);
        return [];
      } catch (e) {
        return (e as ConfigError).problems;
      }
    };
    const pacs = {
      PACS_DIMSE_HOST: 'pacs.local',
      PACS_DIMSE_PORT: '104',
      PACS_DIMSE_AE_TITLE: 'PACS',
    };
    expect(problemsOf({ PACS_DIMSE_HOST: 'pacs.local' })).toEqual([
      expect.stringMatching(/^PACS_DIMSE_HOST \/ PACS_DIMSE_PORT \/ PACS_DIMSE_AE_TITLE: set all/),
      expect.stringMatching(/^DICOM_SCP_PORT: required with PACS_DIMSE_RETRIEVE=move/),
    ]);
    expect(problemsOf(pacs)).toEqual([expect.stringMatching(/^DICOM_SCP_PORT/)]);
    expect(problemsOf({ ...pacs, DICOM_SCP_PORT: '11112' })).toEqual([]);
    const get = loadConfig({ ...pacs, PACS_DIMSE_RETRIEVE: 'get' });
    expect(get).toMatchObject({
      PACS_DIMSE_RETRIEVE: 'get',
      PACS_DIMSE_TIMEOUT_SECONDS: 30,
      PACS_DIMSE_MAX_INSTANCES: 10_000,
    });
    expect(problemsOf({ ...pacs, PACS_DIMSE_RETRIEVE: 'wado' })[0]).toMatch(/^PACS_DIMSE_RETRIEVE/);
    expect(problemsOf({ ...pacs, PACS_DIMSE_AE_TITLE: 'A\\B' })[0]).toMatch(/^PACS_DIMSE_AE_TITLE/);
  });

  it('requires the upstream credentials once IMAGING_BASE_URL is set', () => {
    expect(() => loadConfig({ IMAGING_BASE_URL: 'https://ai.example.org/v1' })).toThrow(
      /IMAGING_CLIENT_ID: required[\s\S]*IMAGING_CLIENT_SECRET: required[\s\S]*IMAGING_ORGANIZATION_ID: required/,
    );
  });

  it('parses role:token pairs and masks secrets when printed', () => {
    const c = loadConfig({
      API_TOKENS: 'admin:0123456789abcdef0123,sender:fedcba9876543210fedc',
      DATABASE_URL: 'postgres://app:s3cret-pw@db:5432/adapter',
      IMAGING_BASE_URL: 'https://ai.example.org/v1',
      IMAGING_CLIENT_ID: 'client',
      IMAGING_CLIENT_SECRET: 'very-secret-value',
      IMAGING_ORGANIZATION_ID: 'org-1',
    });
    expect(c.API_TOKENS).toEqual([
      { role: 'admin', token: '0123456789abcdef0123' },
      { role: 'sender', token: 'fedcba9876543210fedc' },
    ]);
    const printed = JSON.stringify(describeConfig(c));
    expect(printed).not.toContain('s3cret-pw');
    expect(printed).not.toContain('very-secret-value');
    expect(printed).not.toContain('0123456789abcdef0123');
    expect(printed).toContain('admin:****');
  });

  it('reads a YAML site file and reports a broken one by name', () => {
    const good = writeSiteFile(
      'site:\n  name: St Elsewhere\nmappings:\n  hl7:\n    accessionSources: [OBR-18, IPC-1]\n',
    );
    expect(loadConfig({ CONFIG_FILE: good }).site.site?.name).toBe('St Elsewhere');
    const bad = writeSiteFile('{ "site": ', 'bad.json');
    expect(() => loadConfig({ CONFIG_FILE: bad })).toThrow(
      /CONFIG_FILE: .*bad\.json is not valid JSON/,
    );
  });
});
