// The layering of src/ (docs/architecture.md), enforced by `npm run check`: imports point
// down. A file's layer is the first LAYERS row whose pattern matches its path under src/; it
// may import files of its own layer or a lower one, and the `pure` layers import nothing from
// Nest or the database. The sandbox is a separate app: it imports only the base layer, and
// only the composition root (and tests) import it.
import path from 'node:path';
import process from 'node:process';

/** [layer, rank, path patterns under src/] — first match wins; more specific rows first. */
export const LAYERS = [
  ['composition', 6, [/^main\.ts$/, /^bootstrap\.ts$/, /^app\.module\.ts$/, /\.module\.ts$/]],
  ['sandbox', -1, [/^sandbox\//]],
  [
    'transport',
    5,
    [
      /\.controller\.ts$/,
      /^inbound-hl7\//,
      /^inbound-fhir\//,
      /^health\//,
      /^audit\/audit-page\./,
      /^audit\/.*\.view\.ts$/,
      /^audit\/audit-api\./,
      /\.filter\.ts$/,
      /\.middleware\.ts$/,
    ],
  ],
  ['use-case', 4, [/^orders\//, /^studies\//, /^outbound\//, /^audit\//]],
  [
    'adapter',
    3,
    [/^persistence\//, /^jobs\//, /^imaging-client\//, /^auth\//, /^config\//, /^fhir\//],
  ],
  ['mapping', 2, [/^mappings\//, /^hl7\//]],
  ['domain', 1, [/^domain\//]],
  ['base', 0, [/^common\//, /^observability\//, /^imaging-spec\//]],
];

/** Layers that stay pure: no Nest, no database, no HTTP framework. */
const PURE = new Set(['domain', 'mapping']);
const IMPURE_PACKAGES = /^(@nestjs\/|typeorm$|pg$|express$|undici$|graphile-worker$)/;

function layerOf(relative) {
  for (const [name, rank, patterns] of LAYERS)
    if (patterns.some((p) => p.test(relative))) return { name, rank };
  return undefined;
}

function srcRelative(file, srcRoot) {
  const rel = path.relative(srcRoot, file).split(path.sep).join('/');
  return rel.startsWith('..') ? undefined : rel;
}

const rule = {
  meta: {
    type: 'problem',
    docs: { description: 'imports in src/ point down the layers of docs/architecture.md' },
    schema: [],
  },
  create(context) {
    const file = context.filename ?? context.getFilename();
    const srcRoot = path.join(context.cwd ?? process.cwd(), 'src');
    const from = srcRelative(file, srcRoot);
    if (!from || from.endsWith('.spec.ts')) return {};
    const here = layerOf(from);
    if (!here) return {};
    function check(node, spec) {
      if (typeof spec !== 'string') return;
      if (!spec.startsWith('.')) {
        if (PURE.has(here.name) && IMPURE_PACKAGES.test(spec))
          context.report({
            node,
            message: `${from} (${here.name}) must stay pure: no import of '${spec}'`,
          });
        return;
      }
      const target = srcRelative(path.resolve(path.dirname(file), spec), srcRoot);
      if (!target) return;
      const there = layerOf(target.endsWith('.ts') ? target : `${target}.ts`);
      if (!there || there.name === here.name) return;
      const allowed =
        here.name === 'composition' ||
        (here.name === 'sandbox'
          ? there.name === 'base'
          : there.rank >= 0 && there.rank < here.rank);
      if (!allowed)
        context.report({
          node,
          message: `${from} (${here.name}) may not import ${target} (${there.name}): imports point down (docs/architecture.md)`,
        });
    }
    return {
      ImportDeclaration: (node) => check(node, node.source.value),
      ExportNamedDeclaration: (node) => node.source && check(node, node.source.value),
      ExportAllDeclaration: (node) => check(node, node.source.value),
      ImportExpression: (node) => check(node, node.source.value),
    };
  },
};

export const layersPlugin = { rules: { 'imports-point-down': rule } };
