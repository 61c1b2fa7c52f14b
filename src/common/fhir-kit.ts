import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Client as FhirKitClient, ClientConfig } from 'fhir-kit-client';

export type FhirKitModule = { Client: new (config: ClientConfig) => FhirKitClient };

/**
 * fhir-kit-client is ESM-only with an `import`-only exports map, so a bare require() fails
 * outside Jest (whose config maps it). Node >= 22.12 can require() the ESM file itself.
 */
export function loadFhirKit(): FhirKitModule {
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    return require('fhir-kit-client') as FhirKitModule;
  } catch {
    for (const base of module.paths) {
      const file = join(base, 'fhir-kit-client', 'dist', 'index.js');
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      if (existsSync(file)) return require(file) as FhirKitModule;
    }
    throw new Error('fhir-kit-client is not installed');
  }
}
