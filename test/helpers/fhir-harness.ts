import type { Patient } from '@medplum/fhirtypes';
import { Client as PgClient } from 'pg';
import { startTestAdapter, type TestAdapter } from './adapter';
import { fhirFixture } from './fhir-fixtures';
import { startTestFhirServer, type TestFhirServer } from './fhir-server';

/** A real FHIR engine as the EHR (holding the R4 DICOM example patient), the adapter reading it, PostgreSQL. */
export interface FhirHarness {
  ehr: TestFhirServer;
  adapter: TestAdapter;
  db: PgClient;
  close(): Promise<void>;
}

export async function startFhirHarness(
  env: Record<string, string> = {},
  logs?: Parameters<typeof startTestAdapter>[1],
): Promise<FhirHarness> {
  const ehr = await startTestFhirServer();
  await ehr.seed(fhirFixture('r4-patient-example-dicom') as unknown as Patient);
  const adapter = await startTestAdapter(
    {
      FHIR_SERVER_URL: ehr.baseUrl,
      JOBS_ENABLED: 'false',
      ...env,
    },
    logs,
  );
  const db = new PgClient({ connectionString: adapter.db.url });
  await db.connect();
  return {
    ehr,
    adapter,
    db,
    async close() {
      await db.end();
      await adapter.close();
      await ehr.close();
    },
  };
}
