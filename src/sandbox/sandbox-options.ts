import {
  PAGE_STYLES,
  type FaultConfig,
  type FaultSpec,
  type PageStyle,
  type SandboxClient,
  type SandboxOptions,
} from './sandbox-defaults';

// The option types and defaults live in sandbox-defaults.ts; re-exported here so that callers
// keep importing them from the options.
export * from './sandbox-defaults';

export type EnvParseResult =
  { ok: true; options: Partial<SandboxOptions> } | { ok: false; errors: string[] };

const FAULT_FIELDS = ['error5xx', 'rate429', 'slowMs', 'slowShare', 'drop', 'dropAfter'] as const;

/** Validates a fault configuration object; returns error lines (empty when valid). */
export function validateFaultConfig(
  raw: unknown,
  label = 'SANDBOX_FAULTS',
): { config?: FaultConfig; errors: string[] } {
  const errors: string[] = [];
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    return {
      errors: [
        `${label}: must be a JSON object keyed by endpoint ("*", "/new-order", "POST /auth/token", "storage")`,
      ],
    };
  }
  const config: FaultConfig = { endpoints: {} };
  for (const [key, value] of Object.entries(raw as Record<string, unknown>)) {
    if (key === 'seed') {
      if (typeof value !== 'number' || !Number.isInteger(value))
        errors.push(`${label}: "seed" must be an integer`);
      else config.seed = value;
      continue;
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      errors.push(`${label}: entry "${key}" must be an object`);
      continue;
    }
    const spec: FaultSpec = {};
    for (const [field, v] of Object.entries(value as Record<string, unknown>)) {
      if (!(FAULT_FIELDS as readonly string[]).includes(field)) {
        errors.push(
          `${label}: entry "${key}" has unknown field "${field}" (allowed: ${FAULT_FIELDS.join(', ')})`,
        );
        continue;
      }
      if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
        errors.push(`${label}: "${key}.${field}" must be a non-negative number`);
        continue;
      }
      if (field !== 'slowMs' && v > 1) {
        errors.push(`${label}: "${key}.${field}" is a share and must be between 0 and 1`);
        continue;
      }
      spec[field as (typeof FAULT_FIELDS)[number]] = v;
    }
    config.endpoints[key] = spec;
  }
  return errors.length > 0 ? { errors } : { config, errors };
}

function parseClients(raw: string): { clients?: SandboxClient[]; errors: string[] } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch (err) {
    return { errors: [`SANDBOX_CLIENTS: not valid JSON (${(err as Error).message})`] };
  }
  if (!Array.isArray(parsed) || parsed.length === 0) {
    return { errors: ['SANDBOX_CLIENTS: must be a non-empty JSON array of clients'] };
  }
  const errors: string[] = [];
  const clients: SandboxClient[] = [];
  const seen = new Set<string>();
  parsed.forEach((entry: unknown, i) => {
    const at = `SANDBOX_CLIENTS[${i}]`;
    if (typeof entry !== 'object' || entry === null) {
      errors.push(`${at}: must be an object`);
      return;
    }
    const e = entry as Record<string, unknown>;
    const clientId = e.client_id ?? e.clientId;
    const clientSecret = e.client_secret ?? e.clientSecret ?? e.secret;
    const organizationId = e.organization_id ?? e.organizationId;
    const role = e.role ?? 'user';
    const scopes = e.scopes ?? ['read', 'write'];
    if (typeof clientId !== 'string' || clientId === '' || clientId.includes(':')) {
      errors.push(`${at}: "client_id" must be a non-empty string without ":"`);
    } else if (seen.has(clientId)) {
      errors.push(`${at}: duplicate client_id "${clientId}"`);
    }
    if (typeof clientSecret !== 'string' || clientSecret === '')
      errors.push(`${at}: "client_secret" must be a non-empty string`);
    if (typeof organizationId !== 'string' || organizationId === '')
      errors.push(`${at}: "organization_id" must be a non-empty string`);
    if (role !== 'user' && role !== 'org_admin')
      errors.push(`${at}: "role" must be "user" or "org_admin"`);
    if (!Array.isArray(scopes) || scopes.some((s) => s !== 'read' && s !== 'write')) {
      errors.push(`${at}: "scopes" must be an array of "read" and/or "write"`);
    }
    if (typeof clientId === 'string') seen.add(clientId);
    clients.push({
      clientId: String(clientId),
      clientSecret: String(clientSecret),
      organizationId: String(organizationId),
      role: role as SandboxClient['role'],
      scopes: Array.isArray(scopes) ? [...new Set(scopes as ('read' | 'write')[])] : [],
    });
  });
  return errors.length > 0 ? { errors } : { clients, errors };
}

function positiveInt(
  name: string,
  raw: string,
  errors: string[],
  min = 1,
  max = Number.MAX_SAFE_INTEGER,
): number | undefined {
  if (!/^\d+$/.test(raw.trim())) {
    errors.push(`${name}: "${raw}" is not an integer`);
    return undefined;
  }
  const n = Number(raw.trim());
  if (n < min || n > max) {
    errors.push(`${name}: ${n} is out of range ${min}..${max}`);
    return undefined;
  }
  return n;
}

/**
 * Reads the SANDBOX_* environment variables. Every bad variable yields its own line, so a
 * misconfigured start says everything that is wrong at once.
 */
export function parseSandboxEnv(env: NodeJS.ProcessEnv): EnvParseResult {
  const errors: string[] = [];
  const options: Partial<SandboxOptions> = {};
  const get = (name: string): string | undefined => {
    const v = env[name];
    return v === undefined || v === '' ? undefined : v;
  };
  /** A flag: "true" or "false"; anything else is an error line and leaves the default. */
  const flag = (name: string): boolean | undefined => {
    const raw = get(name);
    if (raw === undefined) return undefined;
    if (raw !== 'true' && raw !== 'false') {
      errors.push(`${name}: "${raw}" must be "true" or "false"`);
      return undefined;
    }
    return raw === 'true';
  };

  const port = get('SANDBOX_PORT');
  if (port !== undefined) options.port = positiveInt('SANDBOX_PORT', port, errors, 0, 65535);
  const host = get('SANDBOX_HOST');
  if (host !== undefined) options.host = host;
  const clients = get('SANDBOX_CLIENTS');
  if (clients !== undefined) {
    const r = parseClients(clients);
    errors.push(...r.errors);
    if (r.clients) options.clients = r.clients;
  }
  const scale = get('SANDBOX_TIME_SCALE');
  if (scale !== undefined) {
    const n = Number(scale);
    if (!Number.isFinite(n) || n <= 0)
      errors.push(
        `SANDBOX_TIME_SCALE: "${scale}" must be a positive number (1 = step times in seconds)`,
      );
    else options.timeScale = n;
  }
  const dataDir = get('SANDBOX_DATA_DIR');
  if (dataDir !== undefined) options.dataDir = dataDir;
  const perEndpoint = get('SANDBOX_RATE_LIMIT_PER_ENDPOINT');
  if (perEndpoint !== undefined)
    options.rateLimitPerEndpoint = positiveInt(
      'SANDBOX_RATE_LIMIT_PER_ENDPOINT',
      perEndpoint,
      errors,
    );
  const perIp = get('SANDBOX_RATE_LIMIT_PER_IP');
  if (perIp !== undefined)
    options.rateLimitPerIp = positiveInt('SANDBOX_RATE_LIMIT_PER_IP', perIp, errors);
  const maxConnections = get('SANDBOX_MAX_CONNECTIONS');
  if (maxConnections !== undefined)
    options.maxConnections = positiveInt('SANDBOX_MAX_CONNECTIONS', maxConnections, errors);
  const idle = get('SANDBOX_IDLE_TIMEOUT_SECONDS');
  if (idle !== undefined)
    options.idleTimeoutSeconds = positiveInt('SANDBOX_IDLE_TIMEOUT_SECONDS', idle, errors);
  const deprecation = get('SANDBOX_DEPRECATION_DATE');
  if (deprecation !== undefined) {
    if (
      !/^\d{4}-\d{2}-\d{2}$/.test(deprecation) ||
      Number.isNaN(Date.parse(`${deprecation}T00:00:00Z`))
    ) {
      errors.push(`SANDBOX_DEPRECATION_DATE: "${deprecation}" must be a date yyyy-mm-dd`);
    } else options.deprecationDate = deprecation;
  }
  const retired = flag('SANDBOX_RETIRED');
  if (retired !== undefined) options.retired = retired;
  const guide = get('SANDBOX_MIGRATION_GUIDE_URL');
  if (guide !== undefined) {
    try {
      new URL(guide);
      options.migrationGuideUrl = guide;
    } catch {
      errors.push(`SANDBOX_MIGRATION_GUIDE_URL: "${guide}" is not an absolute URL`);
    }
  }
  const faults = get('SANDBOX_FAULTS');
  if (faults !== undefined) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(faults);
      const r = validateFaultConfig(parsed);
      errors.push(...r.errors);
      if (r.config) options.faults = r.config;
    } catch (err) {
      errors.push(`SANDBOX_FAULTS: not valid JSON (${(err as Error).message})`);
    }
  }
  const key = get('SANDBOX_SIGNING_KEY');
  if (key !== undefined) {
    if (key.length < 16) errors.push('SANDBOX_SIGNING_KEY: must be at least 16 characters');
    else options.signingKey = Buffer.from(key, 'utf8');
  }
  const publicOrigin = get('SANDBOX_PUBLIC_ORIGIN');
  if (publicOrigin !== undefined) {
    let parsedOrigin: URL | null;
    try {
      parsedOrigin = new URL(publicOrigin);
    } catch {
      parsedOrigin = null;
    }
    if (
      !parsedOrigin ||
      !['http:', 'https:'].includes(parsedOrigin.protocol) ||
      parsedOrigin.pathname !== '/' ||
      publicOrigin.endsWith('/')
    ) {
      errors.push(
        `SANDBOX_PUBLIC_ORIGIN: "${publicOrigin}" must be scheme://host[:port] without a path or trailing slash`,
      );
    } else options.publicOrigin = publicOrigin;
  }
  const basic = get('SANDBOX_BASIC_AUTH_ENCODING');
  if (basic !== undefined) {
    if (basic === 'rfc6749' || basic === 'raw') options.basicAuthEncoding = basic;
    else errors.push(`SANDBOX_BASIC_AUTH_ENCODING: "${basic}" must be rfc6749 or raw`);
  }
  const pageSize = get('SANDBOX_PAGE_SIZE');
  if (pageSize !== undefined)
    options.pageSize = positiveInt('SANDBOX_PAGE_SIZE', pageSize, errors, 1, 10_000);
  const pageStyle = get('SANDBOX_PAGE_STYLE');
  if (pageStyle !== undefined) {
    if ((PAGE_STYLES as readonly string[]).includes(pageStyle))
      options.pageStyle = pageStyle as PageStyle;
    else errors.push(`SANDBOX_PAGE_STYLE: "${pageStyle}" must be one of ${PAGE_STYLES.join(', ')}`);
  }
  const perUser = flag('SANDBOX_REPORTS_PER_USER');
  if (perUser !== undefined) options.reportsPerUser = perUser;
  const log = flag('SANDBOX_LOG_REQUESTS');
  if (log !== undefined) options.logRequests = log;
  return errors.length > 0 ? { ok: false, errors } : { ok: true, options };
}
