import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError, loadConfig } from '../config/app-config';
import { generateTokens, issuedAtOf, writeGeneratedFile } from './api-credentials';

/**
 * `npm run tokens` says where the API tokens come from and when the generated ones were
 * issued; `npm run tokens -- --rotate` issues one new token per role, prints them once and
 * stores their hashes in DATA_DIR (a running adapter keeps the old ones until its restart).
 */
function main(): void {
  const args = process.argv.slice(2);
  if (args.some((a) => a !== '--rotate')) {
    process.stderr.write('usage: npm run tokens [-- --rotate]\n');
    process.exit(2);
  }
  const config = loadConfig();
  const file = join(config.DATA_DIR, 'api-tokens.sha256');
  const say = (line: string) => process.stdout.write(`${line}\n`);
  if (config.API_TOKENS || config.API_TOKENS_FILE) {
    say(
      `API tokens come from ${config.API_TOKENS ? 'API_TOKENS' : `API_TOKENS_FILE (${config.API_TOKENS_FILE})`}; generated tokens are not used. Change them there.`,
    );
    if (args.includes('--rotate')) process.exit(2);
    return;
  }
  if (!args.includes('--rotate')) {
    if (existsSync(file))
      say(
        `API tokens were issued on ${issuedAtOf(file).toISOString()} (hashes in ${file}); \`npm run tokens -- --rotate\` issues new ones.`,
      );
    else say(`No API tokens issued yet: the next \`npm start\` issues and prints them.`);
    return;
  }
  const generated = generateTokens();
  writeGeneratedFile(file, generated);
  say(`New API tokens, one per role. They are shown only now; their hashes are in ${file}.`);
  for (const g of generated) say(`  ${g.role.padEnd(8)} ${g.token}`);
  say('A running adapter keeps accepting the old tokens until it is restarted.');
}

try {
  main();
} catch (error) {
  if (error instanceof ConfigError) {
    for (const p of error.problems) process.stderr.write(`imaging-ai-adapter: ${p}\n`);
    process.exit(2);
  }
  throw error;
}
