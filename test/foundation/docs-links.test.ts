import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/**
 * The README and docs/ link only files a clone has: a relative link that leaves the
 * repository (the design file beside it, say) or names a missing file fails here.
 */
describe('documentation links', () => {
  const root = resolve(__dirname, '../..');
  const files = ['README.md', ...readdirSync(join(root, 'docs')).map((f) => `docs/${f}`)].filter(
    (f) => f.endsWith('.md'),
  );

  it.each(files)('%s links only files inside the repository', (file) => {
    const text = readFileSync(join(root, file), 'utf8');
    const bad: string[] = [];
    for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1]!.split('#')[0]!;
      if (!target || /^[a-z]+:/i.test(target)) continue; // http(s), mailto
      const full = resolve(dirname(join(root, file)), target);
      if (relative(root, full).startsWith('..') || !existsSync(full)) bad.push(m[1]!);
    }
    expect(bad).toEqual([]);
  });
});
