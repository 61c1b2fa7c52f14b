import { exitWithin, spawnAdapter } from '../helpers/adapter-process';
import { writeSiteFile } from '../helpers/site-file';

const TOKENS = 'admin:site-file-admin-token-01,sender:site-file-sender-token-1';

describe('CONFIG_FILE product table rows are checked at boot', () => {
  it('a numeric CPT code, a misspelt key and a product not in a list stop the start, one line each', async () => {
    // A site's rows as an analyst writes them from the RIS's code list: CPT codes are numbers
    // (71250 CT thorax without contrast, 70450 CT head without contrast), which YAML reads as
    // numbers; before, the start went on and every HL7 order was answered AR 207 (`s?.trim is
    // not a function`), the misspelt row's orders too (`reading 'join'`).
    const site = writeSiteFile(
      [
        'site:',
        '  name: Example hospital',
        'mappings:',
        '  productTable:',
        '    - code: 71250',
        '      system: C4',
        '      products: [lung-nodule-ct]',
        '      note: CT thorax w/o contrast',
        "    - code: '70450'",
        '      system: C4',
        '      products: [head-ct-hemorrhage]',
        '    - code: MRKOPF',
        '      product: [brain-mr-volumetry]',
        '    - code: CTTHX',
        '      products: lung-nodule-ct',
        '',
      ].join('\n'),
    );
    const proc = spawnAdapter({
      CONFIG_FILE: site,
      DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none',
      API_TOKENS: TOKENS,
      HTTP_PORT: '0',
      MLLP_PORT: '0',
    });
    const { code } = await exitWithin(proc, 30_000);
    expect(code).toBe(2);
    expect(proc.output().trim().split('\n')).toEqual([
      "imaging-ai-adapter: CONFIG_FILE: mappings.productTable[0].code must be quoted text ('71250'): YAML read it as a number",
      'imaging-ai-adapter: CONFIG_FILE: mappings.productTable[2]: unknown key "product" (a row has code, system, products, note)',
      'imaging-ai-adapter: CONFIG_FILE: mappings.productTable[2].products must be a list of one or more product names ([name, ...])',
      'imaging-ai-adapter: CONFIG_FILE: mappings.productTable[3].products must be a list of one or more product names ([name, ...])',
    ]);
  });

  it('the same rows under mappings.hl7.productTable are checked too', async () => {
    const bad = spawnAdapter({
      CONFIG_FILE: writeSiteFile(
        'mappings:\n  hl7:\n    productTable:\n      - {code: 71250, products: [lung-nodule-ct]}\n',
      ),
      DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none',
      API_TOKENS: TOKENS,
    });
    expect((await exitWithin(bad, 30_000)).code).toBe(2);
    expect(bad.output().trim()).toBe(
      "imaging-ai-adapter: CONFIG_FILE: mappings.hl7.productTable[0].code must be quoted text ('71250'): YAML read it as a number",
    );
  });
});

describe('CONFIG_FILE mappings.hl7 is checked at boot', () => {
  it('a source not in a list, a misspelt key, a bare unknownProcedure and an unknown field stop the start', async () => {
    // Before, each passed the boot: every HL7 order was answered AR 207
    // (`config.accessionSources.join is not a function`), `fieldConflict` was ignored.
    const proc = spawnAdapter({
      CONFIG_FILE: writeSiteFile(
        [
          'mappings:',
          '  hl7:',
          '    accessionSources: OBR-18',
          '    fieldConflict: warn',
          '    unknownProcedure: default-products',
          '    allowedFields: [patient.identifiers, accessionNumber, patientName]',
          '',
        ].join('\n'),
      ),
      DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none',
      API_TOKENS: TOKENS,
    });
    expect((await exitWithin(proc, 30_000)).code).toBe(2);
    const lines = proc.output().trim().split('\n');
    expect(lines).toHaveLength(4);
    expect(lines[0]).toBe(
      'imaging-ai-adapter: CONFIG_FILE: mappings.hl7: unknown key "fieldConflict" (one of accessionSources, productTable, unknownProcedure, senderUtcOffset, senderTimeZone, allowedFields, fieldConflicts)',
    );
    expect(lines[1]).toBe(
      'imaging-ai-adapter: CONFIG_FILE: mappings.hl7.accessionSources must be a list of fields such as [IPC-1, OBR-18]',
    );
    expect(lines[2]).toMatch(
      /^imaging-ai-adapter: CONFIG_FILE: mappings\.hl7\.allowedFields must be a list of patient\.identifiers, /,
    );
    expect(lines[3]).toBe(
      'imaging-ai-adapter: CONFIG_FILE: mappings.hl7.unknownProcedure must be { kind: reject } or { kind: default-products, products: [name, ...] }',
    );
  });
});

describe('CONFIG_FILE mappings.status is checked before the database', () => {
  it('a misspelt status row stops the start with one line, exit 2, no database reached', async () => {
    // Before, the outbound module found it once the application was built: after the database
    // connection and migrations, as a Nest ExceptionHandler log line, exit 1.
    const proc = spawnAdapter({
      CONFIG_FILE: writeSiteFile(
        'mappings:\n  status:\n    DELIVERD:\n      task: { status: completed }\n',
      ),
      DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none',
      API_TOKENS: TOKENS,
    });
    expect((await exitWithin(proc, 30_000)).code).toBe(2);
    expect(proc.output().trim()).toMatch(
      /^imaging-ai-adapter: CONFIG_FILE: mappings\.status\.DELIVERD: unknown row \(rows: RECEIVED, [A-Z_, ]+\)$/,
    );
  });
});
