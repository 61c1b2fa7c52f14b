/**
 * Run as a child process by timestamps.sandbox.test.ts, under the TZ it is given: creates one
 * order through the client against argv[2] (a base URL) with correlation id argv[3], and prints
 * the outcome as one JSON line. The machine's time zone is fixed when a process starts, so a
 * hospital server's local time can only be had in a process of its own.
 */
import { buildClient } from './sandbox-harness';

async function main(): Promise<void> {
  const [baseUrl, correlationId] = process.argv.slice(2);
  const c = buildClient(baseUrl!, { createSettleMs: 300 });
  try {
    const created = await c.client.createOrder(
      { study_uid: '1.2.826.0.1.3680043.8.498.1', modality: 'MR' },
      { correlationId: correlationId! },
    );
    process.stdout.write(`${JSON.stringify(created)}\n`);
  } finally {
    await c.close();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${String(error)}\n`);
  process.exit(1);
});
