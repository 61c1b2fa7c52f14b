import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';

const root = join(__dirname, '../..');
const read = (p: string) => readFileSync(join(root, p), 'utf8');

/** Every metric our code registers (`name: 'adapter_…'`), plus prom-client's default ones. */
function registeredMetrics(): Set<string> {
  const names = new Set<string>();
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (p.endsWith('.ts'))
        for (const m of readFileSync(p, 'utf8').matchAll(/name: '(adapter_\w+)'/g))
          names.add(m[1]!);
    }
  };
  walk(join(root, 'src'));
  return names;
}

/** The adapter_* series an expression reads, without histogram/summary suffixes. */
function metricsIn(expr: string): string[] {
  return [...expr.matchAll(/\b(adapter_\w+)/g)].map((m) =>
    m[1]!.replace(/_(bucket|count|sum)$/, ''),
  );
}

function unknownMetrics(exprs: string[]): string[] {
  const known = registeredMetrics();
  return exprs
    .flatMap(metricsIn)
    .filter((m) => !known.has(m) && !/^adapter_(process|nodejs)_/.test(m));
}

/** Docker's .dockerignore semantics, enough for ours: patterns in order, the last match wins. */
function ignored(patterns: string[], path: string): boolean {
  let out = false;
  for (const raw of patterns) {
    const negate = raw.startsWith('!');
    const pattern = negate ? raw.slice(1) : raw;
    const re = new RegExp(
      `^${pattern
        .replace(/[.+^${}()|[\]\\]/g, '\\$&')
        .replace(/\*\*\//g, '(.*/)?')
        .replace(/\*/g, '[^/]*')}(/.*)?$`,
    );
    if (re.test(path)) out = !negate;
  }
  return out;
}

describe('operations kit (docker/, .dockerignore)', () => {
  it('.dockerignore keeps the build context small and lets every COPY source of the Dockerfile in', () => {
    const patterns = read('.dockerignore')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
    let bytes = 0;
    const walk = (rel: string) => {
      for (const e of readdirSync(join(root, rel), { withFileTypes: true })) {
        const p = rel ? `${rel}/${e.name}` : e.name;
        if (e.isDirectory()) {
          // a directory docker would skip entirely (no later `!` pattern re-includes under it)
          if (ignored(patterns, p) && !patterns.some((x) => x.startsWith(`!${p}/`))) continue;
          walk(p);
        } else if (!ignored(patterns, p)) bytes += lstatSync(join(root, p)).size;
      }
    };
    walk('');
    expect(bytes).toBeLessThan(20 * 1024 * 1024);
    for (const dir of ['node_modules', '.tools', '.data', '.git'])
      expect({ dir, ignored: ignored(patterns, `${dir}/x`) }).toEqual({ dir, ignored: true });
    const dockerfile = read('docker/Dockerfile');
    const sources = [...dockerfile.matchAll(/^COPY (?!--from)(?:--\S+ )*(.+) \S+$/gm)].flatMap(
      (m) => m[1]!.split(/\s+/),
    );
    expect(sources.length).toBeGreaterThan(3);
    for (const s of sources)
      expect({ s, ignored: ignored(patterns, s) }).toEqual({ s, ignored: false });
  });

  it('compose: every service restarts by itself; the data directory is a volume', () => {
    const compose = parse(read('docker/compose.yaml')) as {
      services: Record<
        string,
        { restart?: string; volumes?: string[]; environment?: Record<string, string> }
      >;
      volumes: Record<string, unknown>;
    };
    for (const [name, s] of Object.entries(compose.services))
      expect({ name, restart: s.restart }).toEqual({ name, restart: 'unless-stopped' });
    const adapter = compose.services.adapter!;
    const dataDir = adapter.environment!.DATA_DIR!;
    expect(adapter.volumes).toContain(`adapterdata:${dataDir}`);
    expect(read('docker/Dockerfile')).toContain(`DATA_DIR=${dataDir}`);
    expect(Object.keys(compose.volumes)).toContain('adapterdata');
    for (const s of Object.values(compose.services))
      for (const v of s.volumes ?? []) {
        const host = v.split(':')[0]!;
        if (host.startsWith('./') && !host.includes('analyst-token'))
          expect({ v, exists: existsSync(join(root, 'docker', host)) }).toEqual({
            v,
            exists: true,
          });
      }
  });

  it('alert rules: valid, cover the operator-facing failures, and read only metrics we export', () => {
    const rules = parse(read('docker/prometheus/alerts.yml')) as {
      groups: Array<{
        rules: Array<{ alert: string; expr: string; annotations: { summary: string } }>;
      }>;
    };
    const all = rules.groups.flatMap((g) => g.rules);
    const byAlert = Object.fromEntries(all.map((r) => [r.alert, r.expr]));
    expect(byAlert.AdapterDeadLetters).toContain('adapter_outbound_attempts_total{outcome="dead"}');
    expect(byAlert.AdapterOrdersStuck).toMatch(
      /adapter_order_alerts_total\{alert=~"study-deadline\|upstream-stuck"\}/,
    );
    expect(byAlert.AdapterUpstreamRetired).toContain('adapter_upstream_retired');
    expect(byAlert.AdapterUpstreamDeprecation).toContain('adapter_upstream_deprecation_warning');
    expect(byAlert.AdapterUpstreamRateLimitExhausted).toContain(
      'adapter_upstream_rate_limit_wait_seconds_total',
    );
    expect(byAlert.AdapterMllpRefusals).toContain('adapter_hl7_messages_total{ack=~"AR.*"}');
    // a peer down for an hour: its results retry (not dead yet) and pile up in the outbox
    expect(byAlert.AdapterDestinationBacklog).toContain('adapter_outbox_oldest_pending_seconds');
    for (const r of all) expect(r.annotations.summary).toBeTruthy();
    expect(unknownMetrics(all.map((r) => r.expr))).toEqual([]);
    let promtool = true;
    try {
      execFileSync('promtool', ['--version'], { stdio: 'ignore' });
    } catch {
      promtool = false; // not installed (apt: prometheus): the YAML checks above still ran
    }
    if (promtool)
      expect(
        execFileSync('promtool', ['check', 'rules', join(root, 'docker/prometheus/alerts.yml')], {
          encoding: 'utf8',
        }),
      ).toMatch(/SUCCESS: \d+ rules found/);
  });

  it('the Grafana dashboard is JSON over metrics we export', () => {
    const dash = JSON.parse(read('docker/grafana/imaging-ai-adapter.dashboard.json')) as {
      panels: Array<{ title: string; targets: Array<{ expr: string }> }>;
    };
    const exprs = dash.panels.flatMap((p) => p.targets.map((t) => t.expr));
    expect(exprs.length).toBeGreaterThan(10);
    expect(unknownMetrics(exprs)).toEqual([]);
    expect(exprs.join('\n')).toMatch(/adapter_outbound_attempts_total/);
  });
});
