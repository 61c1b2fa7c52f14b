import path from 'node:path';
import { ESLint } from 'eslint';

/**
 * The layering rule of `npm run check` (scripts/eslint-layers.mjs, docs/architecture.md),
 * run through ESLint with the project's own configuration on sources placed in src/.
 */
describe('imports point down (lint rule)', () => {
  const root = path.resolve(__dirname, '../..');
  const eslint = new ESLint({ cwd: root });

  async function problems(file: string, code: string): Promise<string[]> {
    const [result] = await eslint.lintText(code, { filePath: path.join(root, file) });
    return (result?.messages ?? [])
      .filter((m) => m.ruleId === 'layers/imports-point-down')
      .map((m) => m.message);
  }

  it('refuses a wrong-way import: the domain importing a use case', async () => {
    const found = await problems(
      'src/domain/example.ts',
      "import { OrderIntakeService } from '../orders/order-intake.service';\nexport const x = OrderIntakeService;\n",
    );
    expect(found).toHaveLength(1);
    expect(found[0]).toContain('domain/example.ts (domain) may not import orders/');
  });

  it('refuses a mapping that imports a transport or Nest', async () => {
    expect(
      await problems(
        'src/mappings/example.ts',
        "import { Injectable } from '@nestjs/common';\nimport { siteHl7 } from '../inbound-hl7/x';\nexport const x = [Injectable, siteHl7];\n",
      ),
    ).toHaveLength(2);
  });

  it('refuses a use case importing a transport, and the sandbox importing the client', async () => {
    expect(
      await problems(
        'src/outbound/example.ts',
        "import { x } from '../inbound-fhir/fhir-order.service';\nexport const y = x;\n",
      ),
    ).toHaveLength(1);
    expect(
      await problems(
        'src/sandbox/example.ts',
        "import { x } from '../imaging-client/imaging-client';\nexport const y = x;\n",
      ),
    ).toHaveLength(1);
  });

  it('lets imports point down and the composition root wire everything', async () => {
    expect(
      await problems(
        'src/orders/example.ts',
        "import { x } from '../domain/order-state';\nimport { y } from '../mappings/status-mapping.table';\nimport { z } from '../persistence/migrator';\nexport const w = [x, y, z];\n",
      ),
    ).toEqual([]);
    expect(
      await problems(
        'src/app.module.ts',
        "import { x } from './inbound-hl7/mllp-listener.service';\nimport { y } from './sandbox/sandbox';\nexport const w = [x, y];\n",
      ),
    ).toEqual([]);
  });
});
