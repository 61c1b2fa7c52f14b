import type { AppConfig } from './app-config';

const SECRET_NAME = /SECRET|TOKEN|PASSWORD|KEY|WEBHOOK_URL/i;

export function isSecretName(name: string): boolean {
  return SECRET_NAME.test(name) && !name.endsWith('_FILE');
}

/**
 * A query parameter that carries a credential: libpq (and node-postgres) read
 * `?password=` and `?sslpassword=` of a DATABASE_URL; links may carry `token`, `key`, `sig`.
 */
const SECRET_PARAM = /([?&][^=&#\s]*(?:pass|secret|token|key|sig)[^=&#\s]*=)[^&#\s]*/gi;

function maskSecretParams(value: string): string {
  return value.replace(SECRET_PARAM, '$1****');
}

export function truncate(value: string): string {
  return value.length > 40 ? `${value.slice(0, 37)}...` : value;
}

/**
 * A refused value as a boot line shows it: the password of anything URL-shaped masked (also
 * where the URL does not parse, e.g. a port out of range), truncated, quoted and escaped so
 * that a problem stays on one line.
 */
export function shownValue(value: string): string {
  const masked = maskSecretParams(value.replace(/(\/\/[^/?#@\s:]*:)[^/?#\s]*@/g, '$1****@'));
  return JSON.stringify(truncate(masked));
}

/** Masks passwords in URLs and every secret-named value, for printing. */
export function describeConfig(config: AppConfig): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(config)) {
    if (key === 'site') continue;
    if (value === undefined) continue;
    if (key === 'API_TOKENS' && Array.isArray(value)) {
      out[key] = value.map((t: { role: string }) => `${t.role}:****`).join(',');
    } else if (isSecretName(key)) {
      out[key] = '****';
    } else if (typeof value === 'string' && /^[a-z]+:\/\//i.test(value)) {
      out[key] = maskUrl(value);
    } else {
      out[key] = value;
    }
  }
  return out;
}

/** The URL with its password, and any credential-named query parameter, masked. */
export function maskUrl(value: string): string {
  try {
    const u = new URL(value);
    if (u.password) u.password = '****';
    return maskSecretParams(u.toString());
  } catch {
    return maskSecretParams(value);
  }
}
