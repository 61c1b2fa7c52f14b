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

  /** The cells of a Markdown table row: split on pipes that are not escaped (`\|`). */
  const cells = (row: string) =>
    row
      .trim()
      .replace(/^\|/, '')
      .replace(/\|$/, '')
      .split(/(?<!\\)\|/);

  it.each(files)('%s tables: every row has as many cells as its header', (file) => {
    const lines = readFileSync(join(root, file), 'utf8').split('\n');
    const bad: string[] = [];
    let width = 0;
    lines.forEach((line, i) => {
      if (!line.trimStart().startsWith('|')) {
        width = 0;
        return;
      }
      // a pipe inside code in a cell must be written \| (GFM), or the row's columns shift
      if (width === 0) width = cells(line).length;
      else if (cells(line).length !== width) bad.push(`${file}:${i + 1}`);
    });
    expect(bad).toEqual([]);
  });
});
