import { writeSiteFile } from '../../test/helpers/site-file';
import { loadConfig } from '../config/app-config';
import { backoffMs, deviceFor, DESTINATIONS, outboundSettings } from './outbound.settings';

describe('outbound settings', () => {
  it('backs off exponentially with equal jitter, capped', () => {
    const s = { backoffBaseMs: 2000, backoffMaxMs: 600_000 };
    expect(backoffMs(s, 1, () => 0)).toBe(1000);
    expect(backoffMs(s, 1, () => 0.999999)).toBe(2000);
    expect(backoffMs(s, 4, () => 0)).toBe(8000);
    expect(backoffMs(s, 4, () => 1)).toBe(16_000);
    expect(backoffMs(s, 30, () => 0)).toBe(300_000);
    expect(backoffMs(s, 30, () => 1)).toBe(600_000);
    const spread = new Set(Array.from({ length: 50 }, () => backoffMs(s, 3)));
    expect(spread.size).toBeGreaterThan(10);
  });

  it('configures the destinations that are set, and reads the site file', () => {
    const file = writeSiteFile(
      [
        'mappings:',
        '  status:',
        '    ANALYSIS_RUNNING:',
        '      publish: [fhir-task]',
        '  devices:',
        '    neuro-volumetry:',
        '      udi: "(01)00850012345678"',
        '      version: "4.1"',
        '',
      ].join('\n'),
    );
    const config = loadConfig({
      FHIR_SERVER_URL: 'http://ehr.example/fhir',
      DICOMWEB_URL: 'http://pacs.example/dicom-web',
      CONFIG_FILE: file,
      RIS_ORM_STATUS_MESSAGES: 'true',
    });
    const s = outboundSettings(config);
    expect(s.destinations).toEqual([DESTINATIONS.fhir, DESTINATIONS.dicom]);
    expect(s.overrides.ANALYSIS_RUNNING?.publish).toEqual(['fhir-task']);
    expect(s.ormStatusMessages).toBe(true);
    expect(s.hl7.defaultVersion).toBe('2.5.1');
    expect(deviceFor(s, ['neuro-volumetry'])).toMatchObject({
      name: 'neuro-volumetry',
      udi: '(01)00850012345678',
      version: '4.1',
      manufacturer: 'Imaging Analysis Service',
    });
    expect(deviceFor(s, ['other']).version).toBe('unknown');
    expect(deviceFor(s, ['a']).uid).toMatch(/^2\.25\.\d+$/);
  });

  it('refuses a site override that would present a failure as a finding', () => {
    const file = writeSiteFile(
      JSON.stringify({ mappings: { status: { FAILED: { report: 'final' } } } }),
      'site.json',
    );
    expect(() => outboundSettings(loadConfig({ CONFIG_FILE: file }))).toThrow(/stays cancelled/);
  });
});
