import { z } from 'zod';

// The field types the configuration schema is written in (app-config.ts): each one says
// what a value must look like and what a bad one is told.

export const ROLES = ['sender', 'analyst', 'admin'] as const;
export type Role = (typeof ROLES)[number];

export const port = (fallback: number) =>
  z.coerce
    .number({ message: 'must be a port number' })
    .int('must be a whole number')
    .min(0, 'must be 0..65535')
    .max(65535, 'must be 0..65535')
    .default(fallback);

export const optionalPort = z.coerce
  .number({ message: 'must be a port number' })
  .int('must be a whole number')
  .min(1, 'must be 1..65535')
  .max(65535, 'must be 1..65535')
  .optional();

export const url = (protocols: string[]) =>
  z
    .string()
    .trim()
    .refine(
      (value) => {
        try {
          return protocols.includes(new URL(value).protocol);
        } catch {
          return false;
        }
      },
      `must be a URL (${protocols.join(' or ')})`,
    );

export const optionalUrl = (protocols: string[]) => url(protocols).optional();

/**
 * A peer's base URL (EHR, PACS, upstream): every call is built under it, so user information
 * would be dropped or refused call by call, and a query or fragment dropped from every call.
 * Credentials have their own variables (`credentials`, named in the message).
 */
export const optionalPeerBaseUrl = (credentials: string) =>
  url(['http:', 'https:'])
    .refine((value) => {
      const u = URL.parse(value);
      return !u || (!u.username && !u.password);
    }, `must not carry user information (credentials go in ${credentials})`)
    .refine(
      (value) => !URL.parse(value) || !/[?#]/.test(value),
      'must be a base URL without a ?query or #fragment',
    )
    .optional();

/**
 * This server's own public base (what answers name it by): a base URL as a client writes it,
 * without user information, query or fragment; a trailing `/` is dropped.
 */
export const optionalPublicBaseUrl = url(['http:', 'https:'])
  .refine((value) => {
    const u = URL.parse(value);
    return !u || (!u.username && !u.password);
  }, 'must not carry user information')
  .refine(
    (value) => !URL.parse(value) || !/[?#]/.test(value),
    'must be a base URL without a ?query or #fragment',
  )
  .transform((value) => value.replace(/\/+$/, ''))
  .optional();

export const positiveInt = (fallback: number) =>
  z.coerce
    .number({ message: 'must be a number' })
    .int('must be a whole number')
    .positive('must be > 0')
    .default(fallback);

/**
 * Node's timers hold at most 2^31-1 ms (24.8 days); a longer one fires after 1 ms
 * (TimeoutOverflowWarning): MLLP_FRAME_TIMEOUT_SECONDS=3000000 closed every MLLP connection
 * 24 ms after its first byte. Every duration that may become a timer is bounded by it.
 */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** A duration in seconds (a timer, a lease); `zero` allows 0 where it means "off". */
export const seconds = (fallback: number, zero = false) =>
  z.coerce
    .number({ message: 'must be a number' })
    .int('must be a whole number')
    .min(zero ? 0 : 1, zero ? 'must be >= 0' : 'must be > 0')
    .max(
      Math.floor(MAX_TIMER_MS / 1000),
      `must be at most ${Math.floor(MAX_TIMER_MS / 1000)} (24.8 days, the longest timer)`,
    )
    .default(fallback);

/** A duration in milliseconds (a timer). */
export const milliseconds = (fallback: number) =>
  z.coerce
    .number({ message: 'must be a number' })
    .int('must be a whole number')
    .positive('must be > 0')
    .max(MAX_TIMER_MS, `must be at most ${MAX_TIMER_MS} (24.8 days, the longest timer)`)
    .default(fallback);

export const bool = (fallback: boolean) =>
  z
    .enum(['true', 'false', '1', '0', 'yes', 'no'], { message: 'must be true or false' })
    .transform((v) => v === 'true' || v === '1' || v === 'yes')
    .default(fallback);

export const apiTokens = z
  .string()
  .trim()
  .transform((value, ctx) => {
    const tokens: Array<{ role: Role; token: string }> = [];
    for (const pair of value
      .split(',')
      .map((p) => p.trim())
      .filter(Boolean)) {
      const sep = pair.indexOf(':');
      const role = pair.slice(0, sep) as Role;
      const token = pair.slice(sep + 1);
      if (sep < 1 || !ROLES.includes(role)) {
        ctx.addIssue({
          code: 'custom',
          message: `each entry must be role:token with role one of ${ROLES.join(', ')}`,
        });
        return z.NEVER;
      }
      // "Authorization: Bearer <token>" carries one word (RFC 6750 §2.1): a token with white
      // space or a control character inside could never be presented. The token is not shown.
      // eslint-disable-next-line no-control-regex -- control characters are what is refused
      if (/[\s\x00-\x1f\x7f]/.test(token)) {
        ctx.addIssue({
          code: 'custom',
          message: `the ${role} token contains white space or a control character; a bearer token is one word`,
        });
        return z.NEVER;
      }
      if (token.length < 16) {
        ctx.addIssue({
          code: 'custom',
          message: `the ${role} token must be at least 16 characters`,
        });
        return z.NEVER;
      }
      const same = tokens.find((t) => t.token === token);
      if (same?.role === role) continue;
      if (same) {
        // One token under two roles would act as one of them only (the last one listed).
        ctx.addIssue({
          code: 'custom',
          message: `the ${same.role} and ${role} tokens are the same; each role needs its own token`,
        });
        return z.NEVER;
      }
      tokens.push({ role, token });
    }
    return tokens;
  })
  .optional();

/**
 * A comma-separated list: entries trimmed, normalised by `normalise` (e.g. upper-cased),
 * empty entries dropped.
 */
export const commaList = (normalise: (entry: string) => string = (entry) => entry) =>
  z.string().transform((v) =>
    v
      .split(',')
      .map((t) => normalise(t.trim()))
      .filter(Boolean),
  );
