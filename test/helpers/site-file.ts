import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A site file (CONFIG_FILE) with `content`, named `name`, in a new temporary directory: its path. */
export function writeSiteFile(content: string, name = 'site.yaml'): string {
  const file = join(mkdtempSync(join(tmpdir(), 'site-')), name);
  writeFileSync(file, content);
  return file;
}
