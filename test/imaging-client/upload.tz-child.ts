/**
 * Run as a child process by timestamps.sandbox.test.ts, under the TZ it is given: uploads the
 * study file argv[4] for order argv[3] through the client against argv[2] (a base URL), and
 * prints the calls it made per operation as one JSON line.
 */
import { buildClient } from './sandbox-harness';

async function main(): Promise<void> {
  const [baseUrl, orderId, filePath] = process.argv.slice(2);
  const c = buildClient(baseUrl!);
  try {
    const result = await c.uploader.upload(orderId!, filePath!);
    const calls: Record<string, number> = {};
    for (const r of c.records) calls[r.operation] = (calls[r.operation] ?? 0) + 1;
    process.stdout.write(`${JSON.stringify({ result, calls })}\n`);
  } finally {
    await c.close();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${String(error)}\n`);
  process.exit(1);
});
