import { writeSiteFile } from '../../test/helpers/site-file';
import { DEFAULT_PRODUCT_TABLE } from '../mappings/product-table';
import { ConfigError, describeConfig, loadConfig } from './app-config';
import { siteHl7Mapping, siteProductTable } from './site-mappings';

describe('CONFIG_FILE product rows: replace or extend the built-in table', () => {
  const rows = `  productTable:\n    - code: MRKOPF\n      products: [neuro-volumetry]\n`;

  it('replace (the default): only the site rows, for both front doors', () => {
    const config = loadConfig({ CONFIG_FILE: writeSiteFile(`mappings:\n${rows}`) });
    expect(siteProductTable(config, 'hl7')).toEqual([
      { code: 'MRKOPF', products: ['neuro-volumetry'] },
    ]);
    expect(siteProductTable(config, 'fhir')).toEqual(siteProductTable(config, 'hl7'));
    expect(siteHl7Mapping(config).productTable).toHaveLength(1);
  });

  it('extend: the site rows first (they win), then the built-in ones', () => {
    const config = loadConfig({
      CONFIG_FILE: writeSiteFile(`mappings:\n  productTableMode: extend\n${rows}`),
    });
    const table = siteProductTable(config, 'fhir');
    expect(table).toHaveLength(DEFAULT_PRODUCT_TABLE.length + 1);
    expect(table[0]).toEqual({ code: 'MRKOPF', products: ['neuro-volumetry'] });
    expect(table.slice(1)).toEqual(DEFAULT_PRODUCT_TABLE);
  });

  it('mappings.hl7.productTable (as before) is the HL7 table only; no rows: the built-in table', () => {
    const config = loadConfig({
      CONFIG_FILE: writeSiteFile(`mappings:\n  hl7:\n  ${rows.replace(/\n {4}/g, '\n      ')}`),
    });
    expect(siteProductTable(config, 'hl7')).toHaveLength(1);
    expect(siteProductTable(config, 'fhir')).toBe(DEFAULT_PRODUCT_TABLE);
    expect(siteProductTable(loadConfig({}), 'hl7')).toBe(DEFAULT_PRODUCT_TABLE);
  });

  it('an unknown mode fails the boot with one line', () => {
    expect(() =>
      loadConfig({ CONFIG_FILE: writeSiteFile(`mappings:\n  productTableMode: merge\n${rows}`) }),
    ).toThrow(ConfigError);
    try {
      loadConfig({ CONFIG_FILE: writeSiteFile(`mappings:\n  productTableMode: merge\n`) });
    } catch (e) {
      expect((e as ConfigError).problems).toEqual([
        'CONFIG_FILE: mappings.productTableMode must be replace or extend (got "merge")',
      ]);
    }
  });
});

describe('CONFIG_FILE sender time: a zone or an offset that can be one', () => {
  it('takes an IANA zone and an offset, and refuses at boot what is neither', () => {
    const config = loadConfig({
      CONFIG_FILE: writeSiteFile(
        `mappings:\n  hl7:\n    senderTimeZone: Europe/Berlin\n    senderUtcOffset: '+01:00'\n`,
      ),
    });
    expect(siteHl7Mapping(config)).toMatchObject({
      senderTimeZone: 'Europe/Berlin',
      senderUtcOffset: '+01:00',
    });
    const problems = (text: string) => {
      try {
        loadConfig({ CONFIG_FILE: writeSiteFile(text) });
        return [];
      } catch (e) {
        return (e as ConfigError).problems;
      }
    };
    // `+1` (or a zone that is none) went into every order's times as it was
    expect(
      problems(
        `mappings:\n  hl7:\n    senderTimeZone: Europe/Atlantis\n    senderUtcOffset: '+1'\n`,
      ),
    ).toEqual([
      `CONFIG_FILE: mappings.hl7.senderUtcOffset must be an offset such as '+01:00', from -12:00 to +14:00 (got "+1")`,
      `CONFIG_FILE: mappings.hl7.senderTimeZone must be an IANA time zone such as 'Europe/Berlin' (got "Europe/Atlantis")`,
    ]);
    expect(problems(`mappings:\n  hl7:\n    senderUtcOffset: '+15:00'\n`)).toHaveLength(1);
    expect(problems(`mappings:\n  hl7:\n    senderUtcOffset: '-03:30'\n`)).toEqual([]);
  });
});

describe('the start-up config dump shows what is in effect', () => {
  it('with the in-process sandbox: outcome from notes on, P and T accepted', () => {
    const shown = describeConfig(loadConfig({}));
    expect(shown.IMAGING_SANDBOX_OUTCOME_FROM_NOTES).toBe(true);
    expect(shown.HL7_PROCESSING_IDS).toEqual(['P', 'T']);
  });

  it('against a real upstream: off unless set', () => {
    const upstream = {
      IMAGING_BASE_URL: 'https://vendor.example/v1',
      IMAGING_CLIENT_ID: 'c',
      IMAGING_CLIENT_SECRET: 's',
      IMAGING_ORGANIZATION_ID: 'o',
    };
    expect(describeConfig(loadConfig(upstream)).IMAGING_SANDBOX_OUTCOME_FROM_NOTES).toBe(false);
    expect(describeConfig(loadConfig(upstream)).HL7_PROCESSING_IDS).toEqual(['P']);
    expect(
      describeConfig(loadConfig({ ...upstream, IMAGING_SANDBOX_OUTCOME_FROM_NOTES: 'true' }))
        .IMAGING_SANDBOX_OUTCOME_FROM_NOTES,
    ).toBe(true);
  });
});
