import { createPrivateKey, X509Certificate } from 'node:crypto';
import { accessSync, constants, readFileSync, statSync } from 'node:fs';
import { createSecureContext } from 'node:tls';
import { isAbsolute, resolve } from 'node:path';
import type { EnvConfig } from './app-config';
import { isTimeZone } from '../common/time-zone';
import { ALL_MINIMISABLE_FIELDS } from '../mappings/hl7-order.config';
import { parseStatusOverrides } from '../mappings/outbound-rows';

/** Variables that name a file the adapter reads (CONFIG_FILE is read, and reported, on its own). */
const FILE_VARIABLES = [
  'MLLP_TLS_CERT_FILE',
  'MLLP_TLS_KEY_FILE',
  'MLLP_TLS_CA_FILE',
  'RIS_MLLP_TLS_CA_FILE',
  'FHIR_SMART_PRIVATE_KEY_FILE',
  'API_TOKENS_FILE',
] as const;

/**
 * Each file variable names a readable file: checked at boot, so that a missing certificate or
 * key fails the start at once with its variable's name, not later (after the database and
 * migrations) as a bare `ENOENT` from the module that reads it. A relative path is resolved
 * against the working directory, which the line names.
 */
export function fileProblems(c: EnvConfig, cwd = process.cwd()): string[] {
  const problems: string[] = [];
  for (const name of FILE_VARIABLES) {
    const file = c[name];
    if (file === undefined) continue;
    const where = isAbsolute(file) ? file : `${file} (relative to ${cwd}: ${resolve(cwd, file)})`;
    try {
      if (!statSync(resolve(cwd, file)).isFile()) {
        problems.push(`${name}: ${where} is not a file`);
        continue;
      }
      accessSync(resolve(cwd, file), constants.R_OK);
      const wrong = contentProblem(name, readFileSync(resolve(cwd, file)), c, cwd);
      if (wrong) problems.push(`${name}: ${where} ${wrong}`);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      const why =
        code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'permission denied' : code;
      problems.push(`${name}: cannot read ${where}: ${why ?? 'error'}`);
    }
  }
  return problems;
}

/**
 * The rules that span variables (each variable alone is checked by the schema): pairs set
 * together, and what IMAGING_BASE_URL and the FHIR options require. One line per problem.
 */
export function crossFieldProblems(c: EnvConfig): string[] {
  const problems: string[] = [];
  if ((c.RIS_MLLP_HOST === undefined) !== (c.RIS_MLLP_PORT === undefined)) {
    problems.push('RIS_MLLP_HOST / RIS_MLLP_PORT: set both or neither');
  }
  if (
    [c.PACS_DIMSE_HOST, c.PACS_DIMSE_PORT, c.PACS_DIMSE_AE_TITLE].some((v) => v !== undefined) &&
    [c.PACS_DIMSE_HOST, c.PACS_DIMSE_PORT, c.PACS_DIMSE_AE_TITLE].some((v) => v === undefined)
  ) {
    problems.push('PACS_DIMSE_HOST / PACS_DIMSE_PORT / PACS_DIMSE_AE_TITLE: set all three or none');
  }
  if (c.PACS_DIMSE_HOST && c.PACS_DIMSE_RETRIEVE === 'move' && c.DICOM_SCP_PORT === undefined) {
    problems.push(
      'DICOM_SCP_PORT: required with PACS_DIMSE_RETRIEVE=move (the PACS sends the study to our C-STORE SCP)',
    );
  }
  problems.push(...samePortProblems(c));
  if ((c.MLLP_TLS_CERT_FILE === undefined) !== (c.MLLP_TLS_KEY_FILE === undefined)) {
    problems.push('MLLP_TLS_CERT_FILE / MLLP_TLS_KEY_FILE: set both or neither');
  }
  if (c.IMAGING_BASE_URL) {
    for (const name of [
      'IMAGING_CLIENT_ID',
      'IMAGING_CLIENT_SECRET',
      'IMAGING_ORGANIZATION_ID',
    ] as const) {
      if (!c[name]) problems.push(`${name}: required when IMAGING_BASE_URL is set`);
    }
  }
  if ((c.FHIR_SMART_CLIENT_ID === undefined) !== (c.FHIR_SMART_PRIVATE_KEY_FILE === undefined)) {
    problems.push('FHIR_SMART_CLIENT_ID / FHIR_SMART_PRIVATE_KEY_FILE: set both or neither');
  }
  if ((c.FHIR_SMART_CLIENT_ID || c.FHIR_SUBSCRIPTION_CREATE) && !c.FHIR_SERVER_URL) {
    problems.push(
      'FHIR_SERVER_URL: required with FHIR_SMART_CLIENT_ID or FHIR_SUBSCRIPTION_CREATE',
    );
  }
  if (c.FHIR_SUBSCRIPTION_CREATE && (!c.FHIR_SUBSCRIPTION_TOPIC || !c.FHIR_SUBSCRIPTION_ENDPOINT)) {
    problems.push(
      'FHIR_SUBSCRIPTION_TOPIC / FHIR_SUBSCRIPTION_ENDPOINT: required when FHIR_SUBSCRIPTION_CREATE is true',
    );
  }
  return problems;
}

/** What a readable file must hold: a certificate, a private key (of FHIR_SMART_ALG's kind). */
function contentProblem(
  name: (typeof FILE_VARIABLES)[number],
  bytes: Buffer,
  c: EnvConfig,
  cwd: string,
) {
  try {
    if (name === 'MLLP_TLS_CERT_FILE' || name.endsWith('_CA_FILE')) new X509Certificate(bytes);
  } catch {
    return 'holds no PEM certificate';
  }
  if (name === 'MLLP_TLS_KEY_FILE' || name === 'FHIR_SMART_PRIVATE_KEY_FILE') {
    let type: string | undefined;
    try {
      type = createPrivateKey(bytes).asymmetricKeyType;
    } catch {
      return 'holds no unencrypted PEM private key';
    }
    if (name === 'FHIR_SMART_PRIVATE_KEY_FILE') {
      const wanted = c.FHIR_SMART_ALG === 'ES384' ? 'ec' : 'rsa';
      if (type !== wanted)
        return `holds an ${type ?? 'unknown'} key; FHIR_SMART_ALG=${c.FHIR_SMART_ALG} needs an ${wanted} key`;
    }
    if (name === 'MLLP_TLS_KEY_FILE' && c.MLLP_TLS_CERT_FILE) {
      let cert: Buffer;
      try {
        cert = readFileSync(resolve(cwd, c.MLLP_TLS_CERT_FILE));
        new X509Certificate(cert);
      } catch {
        return undefined; // the certificate's own line says what is wrong with it
      }
      try {
        createSecureContext({ cert, key: bytes });
      } catch {
        return 'does not match MLLP_TLS_CERT_FILE';
      }
    }
  }
  return undefined;
}

/**
 * Two of our own listeners on one port (and overlapping addresses) would fail the start as
 * "in use by another process", after one of them had bound it. Port 0 (any free port) aside.
 */
function samePortProblems(c: EnvConfig): string[] {
  const listeners = [
    { name: 'HTTP_PORT', port: c.HTTP_PORT, host: c.HTTP_HOST },
    { name: 'MLLP_PORT', port: c.MLLP_PORT, host: c.MLLP_HOST },
    ...(c.DICOM_SCP_PORT === undefined
      ? []
      : [
          { name: 'DICOM_SCP_PORT', port: c.DICOM_SCP_PORT, host: c.DICOM_SCP_HOST ?? c.MLLP_HOST },
        ]),
  ];
  const wildcard = (host: string) => host === '0.0.0.0' || host === '::';
  const problems: string[] = [];
  listeners.forEach((a, i) => {
    for (const b of listeners.slice(i + 1)) {
      if (a.port === 0 || a.port !== b.port) continue;
      if (a.host === b.host || wildcard(a.host) || wildcard(b.host))
        problems.push(`${a.name} / ${b.name}: both ${a.port}; each listener needs its own port`);
    }
  });
  return problems;
}

/**
 * A variable that is none of ours but within a typo of one (`MLLP_PORTT`, `DATABASE_URI`,
 * `mllp_port`): the setting it was meant for would silently keep its default (the MLLP listener
 * on 2575, an embedded database instead of the hospital's), so the start stops with one line
 * naming both. Names further away (`HTTP_PROXY`, Kubernetes' `MLLP_SERVICE_PORT`) are left alone,
 * and so is a near name whose setting is itself set (`HTTPS_PORT` of a host beside our
 * `HTTP_PORT`): nothing keeps its default, and a host's own variable must not stop the start.
 */
export function nearMissProblems(
  names: Iterable<string>,
  known: readonly string[],
  isSet: (setting: string) => boolean = () => false,
): string[] {
  const knownSet = new Set(known);
  const problems: string[] = [];
  for (const name of names) {
    if (knownSet.has(name) || !name.includes('_')) continue;
    const upper = name.toUpperCase();
    const bound = upper.length < 8 ? 1 : 2;
    let best: { name: string; distance: number } | undefined;
    for (const candidate of known) {
      const distance = editDistance(upper, candidate, bound);
      if (distance <= bound && (!best || distance < best.distance))
        best = { name: candidate, distance };
    }
    if (best && !isSet(best.name))
      problems.push(
        `${name}: not a setting of this adapter (it is not read); did you mean ${best.name}?`,
      );
  }
  return problems;
}

/** Edit distance with transpositions (optimal string alignment); past `bound` returns bound + 1. */
function editDistance(a: string, b: string, bound: number): number {
  if (Math.abs(a.length - b.length) > bound) return bound + 1;
  let before: number[] = [];
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    let rowMin = i;
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        d = Math.min(d, before[j - 2]! + 1);
      current.push(d);
      rowMin = Math.min(rowMin, d);
    }
    if (rowMin > bound) return bound + 1;
    before = previous;
    previous = current;
  }
  return previous[b.length]!;
}

/** CONFIG_FILE product rows: a list, and a mode that says whether they replace or extend. */
export function siteMappingProblems(site: { mappings?: Record<string, unknown> }): string[] {
  const problems: string[] = [];
  const mappings = (site.mappings ?? {}) as Record<string, unknown>;
  if (
    mappings.productTableMode !== undefined &&
    mappings.productTableMode !== 'replace' &&
    mappings.productTableMode !== 'extend'
  ) {
    problems.push(
      `CONFIG_FILE: mappings.productTableMode must be replace or extend (got ${JSON.stringify(mappings.productTableMode)})`,
    );
  }
  const hl7 = (mappings.hl7 ?? {}) as Record<string, unknown>;
  problems.push(...productTableProblems('mappings.productTable', mappings.productTable));
  problems.push(...productTableProblems('mappings.hl7.productTable', hl7.productTable));
  problems.push(...hl7MappingProblems(hl7));
  // Read by the outbound module once the application is built: a wrong row failed the start
  // only after the database and its migrations, as a Nest exception log line (exit 1).
  try {
    parseStatusOverrides(mappings.status);
  } catch (error) {
    for (const p of (error as Error).message.split('; ')) problems.push(`CONFIG_FILE: ${p}`);
  }
  // Read into every HL7 timestamp sent without an offset: a value that is not one would be
  // written into orders as it is (`2026-03-12T09:15:00+1`).
  if (hl7.senderUtcOffset !== undefined && !isUtcOffset(hl7.senderUtcOffset)) {
    problems.push(
      `CONFIG_FILE: mappings.hl7.senderUtcOffset must be an offset such as '+01:00', from -12:00 to +14:00 (got ${JSON.stringify(hl7.senderUtcOffset)})`,
    );
  }
  if (hl7.senderTimeZone !== undefined && !isTimeZone(hl7.senderTimeZone)) {
    problems.push(
      `CONFIG_FILE: mappings.hl7.senderTimeZone must be an IANA time zone such as 'Europe/Berlin' (got ${JSON.stringify(hl7.senderTimeZone)})`,
    );
  }
  return problems;
}

const HL7_MAPPING_KEYS = [
  'accessionSources',
  'productTable',
  'unknownProcedure',
  'senderUtcOffset',
  'senderTimeZone',
  'allowedFields',
  'fieldConflicts',
];

/**
 * `mappings.hl7` replaces the defaults key by key, each read by every HL7 order: a value of
 * the wrong shape (`accessionSources: OBR-18`, not a list) passed the boot and answered every
 * order AR 207 (`config.accessionSources.join is not a function`); a misspelt key was ignored.
 */
function hl7MappingProblems(hl7: Record<string, unknown>): string[] {
  const at = 'CONFIG_FILE: mappings.hl7';
  const problems: string[] = [];
  for (const key of Object.keys(hl7).filter((k) => !HL7_MAPPING_KEYS.includes(k)))
    problems.push(
      `${at}: unknown key ${JSON.stringify(key)} (one of ${HL7_MAPPING_KEYS.join(', ')})`,
    );
  const list = (value: unknown, ok: (entry: string) => boolean) =>
    Array.isArray(value) &&
    value.length > 0 &&
    value.every((entry) => typeof entry === 'string' && ok(entry));
  if (
    hl7.accessionSources !== undefined &&
    !list(hl7.accessionSources, (e) => /^[A-Z][A-Z0-9]{2}-\d{1,3}$/.test(e))
  )
    problems.push(`${at}.accessionSources must be a list of fields such as [IPC-1, OBR-18]`);
  if (
    hl7.fieldConflicts !== undefined &&
    hl7.fieldConflicts !== 'reject' &&
    hl7.fieldConflicts !== 'warn'
  )
    problems.push(
      `${at}.fieldConflicts must be reject or warn (got ${JSON.stringify(hl7.fieldConflicts)})`,
    );
  const fields: readonly string[] = ALL_MINIMISABLE_FIELDS;
  if (hl7.allowedFields !== undefined && !list(hl7.allowedFields, (e) => fields.includes(e)))
    problems.push(`${at}.allowedFields must be a list of ${fields.join(', ')}`);
  const rule = hl7.unknownProcedure as Record<string, unknown> | undefined;
  if (
    rule !== undefined &&
    !(
      typeof rule === 'object' &&
      rule !== null &&
      ((rule.kind === 'reject' && Object.keys(rule).length === 1) ||
        (rule.kind === 'default-products' &&
          Object.keys(rule).length === 2 &&
          list(rule.products, (e) => e.trim() !== '')))
    )
  )
    problems.push(
      `${at}.unknownProcedure must be { kind: reject } or { kind: default-products, products: [name, ...] }`,
    );
  return problems;
}

const PRODUCT_ROW_KEYS = ['code', 'system', 'products', 'note'];

/**
 * Each product table row as the lookup reads it: `code` and `system` strings, `products` a
 * list of product names, nothing else. A row that is not (a YAML number for a numeric CPT code,
 * `product:` for `products:`, one product not in a list) passed the boot and answered every
 * order AR 207 (`s?.trim is not a function`): the lookup reads every row up to the match. A
 * numeric code is refused, not converted: YAML has already read `071250` as 71250.
 */
function productTableProblems(where: string, rows: unknown): string[] {
  if (rows === undefined) return [];
  if (!Array.isArray(rows))
    return [`CONFIG_FILE: ${where} must be a list of rows (code, products)`];
  const problems: string[] = [];
  rows.forEach((row: unknown, i) => {
    const at = `CONFIG_FILE: ${where}[${i}]`;
    if (typeof row !== 'object' || row === null || Array.isArray(row)) {
      problems.push(`${at} must be a row with code and products`);
      return;
    }
    const r = row as Record<string, unknown>;
    for (const key of Object.keys(r).filter((k) => !PRODUCT_ROW_KEYS.includes(k)))
      problems.push(
        `${at}: unknown key ${JSON.stringify(key)} (a row has ${PRODUCT_ROW_KEYS.join(', ')})`,
      );
    for (const key of ['code', 'system'] as const) {
      const value = r[key];
      if (value === undefined && key === 'system') continue;
      if (typeof value === 'number')
        problems.push(
          `${at}.${key} must be quoted text ('${String(value)}'): YAML read it as a number`,
        );
      else if (typeof value !== 'string' || value.trim() === '')
        problems.push(`${at}.${key} must be text${key === 'code' ? ' (the procedure code)' : ''}`);
    }
    const products = r.products;
    if (
      !Array.isArray(products) ||
      products.length === 0 ||
      products.some((p) => typeof p !== 'string' || p.trim() === '')
    )
      problems.push(`${at}.products must be a list of one or more product names ([name, ...])`);
    if (r.note !== undefined && typeof r.note !== 'string')
      problems.push(`${at}.note must be text`);
  });
  return problems;
}

function isUtcOffset(value: unknown): boolean {
  const m = typeof value === 'string' ? /^([+-])(\d{2}):(\d{2})$/.exec(value) : null;
  if (!m || Number(m[3]) > 59) return false;
  const minutes = Number(m[2]) * 60 + Number(m[3]);
  return m[1] === '-' ? minutes <= 12 * 60 : minutes <= 14 * 60;
}
