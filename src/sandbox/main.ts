/**
 * `npm run sandbox`: serves the Imaging Analysis Service sandbox on SANDBOX_HOST:SANDBOX_PORT.
 * Configuration comes from SANDBOX_* variables (docs/sandbox.md); every bad variable is
 * reported on its own line and the process exits non-zero.
 */
import { parseSandboxEnv } from './sandbox-options';
import { startSandbox } from './sandbox';

async function main(): Promise<void> {
  const parsed = parseSandboxEnv(process.env);
  if (!parsed.ok) {
    for (const line of parsed.errors) console.error(`[sandbox] configuration error: ${line}`);
    process.exit(2);
  }
  const sandbox = await startSandbox({ logRequests: true, ...parsed.options });
  const o = sandbox.options;
  console.log(`[sandbox] Imaging Analysis Service sandbox listening; base URL ${sandbox.baseUrl}`);
  console.log(`[sandbox] OpenAPI document: ${sandbox.baseUrl}/openapi.json`);
  for (const c of o.clients) {
    // Sandbox credentials are fixtures, not secrets: printing them is what makes a demo work.
    console.log(
      `[sandbox] client "${c.clientId}" secret "${c.clientSecret}" organization "${c.organizationId}" role ${c.role} scopes ${c.scopes.join(',')}`,
    );
  }
  console.log(
    `[sandbox] time scale ${o.timeScale}; data dir ${o.dataDir}; rate limits ${o.rateLimitPerEndpoint}/min per endpoint, ${o.rateLimitPerIp}/min per IP` +
      `${o.deprecationDate ? `; deprecation date ${o.deprecationDate}` : ''}${o.retired ? '; RETIRED (every operation answers 410)' : ''}${o.faults ? '; fault injection ON' : ''}`,
  );
  const stop = (signal: string): void => {
    console.log(`[sandbox] ${signal}: shutting down`);
    sandbox.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

main().catch((err: unknown) => {
  console.error(`[sandbox] failed to start: ${(err as Error).message}`);
  process.exit(1);
});
