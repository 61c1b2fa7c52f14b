import { readFileSync } from 'node:fs';
import { extname } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';

/** Per-site mapping overrides from CONFIG_FILE (YAML or JSON); sections are owned by the mapping modules. */
const siteConfigSchema = z
  .object({
    site: z.object({ name: z.string().optional() }).passthrough().optional(),
    mappings: z.record(z.string(), z.unknown()).optional(),
  })
  .passthrough();
export type SiteConfig = z.infer<typeof siteConfigSchema>;

/** Reads and validates CONFIG_FILE; throws an Error naming the file and what is wrong. */
export function readSiteConfig(file: string): SiteConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    throw new Error(`cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? 'error'}`, {
      cause: error,
    });
  }
  let data: unknown;
  try {
    data = extname(file).toLowerCase() === '.json' ? JSON.parse(text) : parseYaml(text);
  } catch (error) {
    throw new Error(
      `${file} is not valid ${extname(file) === '.json' ? 'JSON' : 'YAML'}: ${(error as Error).message.split('\n')[0]}`,
      { cause: error },
    );
  }
  const result = siteConfigSchema.safeParse(data ?? {});
  if (!result.success) {
    throw new Error(
      result.error.issues
        .map((i) => `${file}: ${i.path.join('.') || '(root)'} ${i.message}`)
        .join('; '),
    );
  }
  return result.data;
}
