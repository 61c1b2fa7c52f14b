import { isIP } from 'node:net';
import { z } from 'zod';
import { isSecretName, shownValue } from './config-masking';
import {
  apiTokens,
  bool,
  commaList,
  milliseconds,
  optionalPeerBaseUrl,
  optionalPort,
  optionalPublicBaseUrl,
  optionalUrl,
  port,
  positiveInt,
  seconds,
} from './config-fields';
import {
  crossFieldProblems,
  fileProblems,
  nearMissProblems,
  siteMappingProblems,
} from './config-rules';
import { readSiteConfig, type SiteConfig } from './site-config';

/**
 * One validated configuration for the whole service. Every variable is read here and
 * nowhere else; boot fails with one line per bad variable (ConfigError), and printing
 * the config masks every secret.
 */

// The field types, the cross-variable rules, the site file and the masking live in their own
// files; re-exported here so that callers keep importing them from the config.
export type { Role } from './config-fields';
export type { SiteConfig } from './site-config';
export { describeConfig, maskUrl } from './config-masking';

const envSchema = z.object({
  NODE_ENV: z.enum(['development', 'production', 'test']).default('development'),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  LOG_FORMAT: z.enum(['json', 'pretty']).default('json'),
  /** A repeated warning/error (same message and cause) is written once per this many seconds; 0: every time. */
  LOG_REPEAT_SECONDS: seconds(60, true),
  DATABASE_URL: optionalUrl(['postgres:', 'postgresql:']),
  DATABASE_POOL_SIZE: positiveInt(10),
  INTAKE_BATCHES_IN_FLIGHT: positiveInt(1),
  INTAKE_BATCH_MAX_MESSAGES: positiveInt(64),
  EMBEDDED_PG_DIR: z.string().default('.data/pg'),
  HTTP_PORT: port(8080),
  HTTP_HOST: z.string().default('0.0.0.0'),
  /** HTTP connections held at once; at the limit the longest-idle one gives way. */
  HTTP_MAX_CONNECTIONS: positiveInt(1000),
  /** A connection with no request under way (headers not complete, keep-alive) for this long is closed. */
  /**
   * Connections one client address holds at once, and requests it has under way (per
   * X-Forwarded-For client behind HTTP_TRUSTED_PROXIES); /health is not counted.
   */
  HTTP_MAX_CONNECTIONS_PER_CLIENT: positiveInt(100),
  /** Reverse proxies (IP addresses) whose X-Forwarded-For names the client; none by default. */
  HTTP_TRUSTED_PROXIES: commaList()
    .pipe(
      z
        .array(z.string().refine((a) => isIP(a) !== 0, 'each entry must be an IP address'))
        .max(32, 'at most 32 addresses'),
    )
    .default([]),
  HTTP_IDLE_TIMEOUT_SECONDS: seconds(30),
  /** A request body still due that gets no byte for this long is answered 408 and the connection closed. */
  HTTP_BODY_STALL_SECONDS: seconds(30),
  /** Past its first HTTP_BODY_STALL_SECONDS a request body must average this rate, else 408. */
  HTTP_BODY_MIN_BYTES_PER_SECOND: positiveInt(1024),
  MLLP_PORT: port(2575),
  MLLP_HOST: z.string().default('0.0.0.0'),
  MLLP_MAX_MESSAGE_BYTES: positiveInt(10 * 1024 * 1024),
  MLLP_FRAME_TIMEOUT_SECONDS: seconds(30),
  MLLP_MAX_CONNECTIONS: positiveInt(1000),
  /** MLLP connections one peer address holds at once; its own idlest gives way at the bound. */
  MLLP_MAX_CONNECTIONS_PER_CLIENT: positiveInt(100),
  /** 0 keeps idle connections open for ever (not recommended). */
  MLLP_IDLE_TIMEOUT_SECONDS: seconds(300, true),
  /** 0 disables the budget. */
  MLLP_MAX_INFLIGHT_BYTES: z.coerce
    .number()
    .int()
    .min(0)
    .default(4 * 1024 * 1024),
  HL7_MAX_SEGMENTS: positiveInt(5_000),
  HL7_MAX_FIELDS: positiveInt(500),
  HL7_MAX_REPETITIONS: positiveInt(1_000),
  HL7_MAX_COMPONENTS: positiveInt(100),
  /** MSH-11.1 values accepted (table 0103); default P, or P,T with the in-process sandbox. */
  HL7_PROCESSING_IDS: commaList((t) => t.toUpperCase())
    .pipe(z.array(z.enum(['P', 'T', 'D'])).min(1, 'name at least one of P, T, D'))
    .optional(),
  MLLP_TLS_CERT_FILE: z.string().optional(),
  MLLP_TLS_KEY_FILE: z.string().optional(),
  MLLP_TLS_CA_FILE: z.string().optional(),
  IMAGING_BASE_URL: optionalPeerBaseUrl('IMAGING_CLIENT_ID / IMAGING_CLIENT_SECRET'),
  IMAGING_CLIENT_ID: z.string().min(1).optional(),
  IMAGING_CLIENT_SECRET: z.string().min(1).optional(),
  IMAGING_ORGANIZATION_ID: z.string().min(1).optional(),
  IMAGING_RATE_LIMIT_PER_ENDPOINT: positiveInt(600),
  IMAGING_RATE_LIMIT_TOTAL: positiveInt(2000),
  IMAGING_UPLOAD_PART_CONCURRENCY: positiveInt(4),
  IMAGING_MAX_CONCURRENT_UPLOADS: positiveInt(100),
  IMAGING_BASIC_AUTH_ENCODING: z.enum(['rfc6749', 'raw']).default('rfc6749'),
  IMAGING_UPLOAD_HOSTS: commaList((h) => h.toLowerCase())
    .pipe(
      z.array(
        z
          .string()
          .regex(
            /^(\*\.)?[a-z0-9.-]+(:\d{1,5})?$|^\[[0-9a-f:.]+\](:\d{1,5})?$/,
            'each entry must be host, host:port or *.domain',
          ),
      ),
    )
    .optional(),
  IMAGING_RETRY_MAX_ATTEMPTS: positiveInt(6),
  IMAGING_RETRY_DEADLINE_SECONDS: seconds(120),
  IMAGING_SANDBOX_OUTCOME_FROM_NOTES: bool(false),
  STUDY_DEADLINE_MINUTES: positiveInt(24 * 60),
  UPSTREAM_STUCK_HOURS: positiveInt(72),
  ORDER_LEASE_SECONDS: seconds(60),
  FHIR_SERVER_URL: optionalPeerBaseUrl('FHIR_SERVER_TOKEN or FHIR_SMART_CLIENT_ID'),
  FHIR_SERVER_TOKEN: z.string().min(1).optional(),
  /**
   * The FHIR base clients reach us at (behind a reverse proxy, the proxy's): Location headers,
   * search links and fullUrls are built on it. Unset: the address the connection reached.
   * Never the request's Host header.
   */
  FHIR_PUBLIC_BASE_URL: optionalPublicBaseUrl,
  FHIR_MAX_BODY_BYTES: positiveInt(5 * 1024 * 1024),
  FHIR_MAX_JSON_VALUES: positiveInt(20_000),
  FHIR_MAX_NOTIFICATION_EVENTS: positiveInt(100),
  FHIR_UNKNOWN_PROCEDURE: z
    .string()
    .trim()
    .regex(
      /^(reject|default-products:[^,\s]+(,[^,\s]+)*)$/,
      'must be reject or default-products:a,b',
    )
    .default('reject'),
  FHIR_SMART_CLIENT_ID: z.string().min(1).optional(),
  FHIR_SMART_PRIVATE_KEY_FILE: z.string().min(1).optional(),
  FHIR_SMART_KEY_ID: z.string().min(1).optional(),
  FHIR_SMART_ALG: z.enum(['RS384', 'ES384']).default('RS384'),
  FHIR_SMART_TOKEN_URL: optionalUrl(['http:', 'https:']),
  FHIR_SMART_SCOPES: z
    .string()
    .default(
      'system/ServiceRequest.rs system/Patient.rs system/ImagingStudy.rs system/Practitioner.rs system/Condition.rs system/Subscription.crus',
    ),
  FHIR_SUBSCRIPTION_CREATE: bool(false),
  FHIR_SUBSCRIPTION_TOPIC: z.string().min(1).optional(),
  FHIR_SUBSCRIPTION_ENDPOINT: optionalUrl(['http:', 'https:']),
  FHIR_SUBSCRIPTION_PAYLOAD: z.enum(['empty', 'id-only', 'full-resource']).default('id-only'),
  FHIR_SUBSCRIPTION_FILTER: z.string().min(1).optional(),
  FHIR_SUBSCRIPTION_TOKEN: z.string().min(1).optional(),
  FHIR_CATCHUP_SEARCH: z.string().default(''),
  RIS_MLLP_HOST: z.string().min(1).optional(),
  RIS_MLLP_PORT: optionalPort,
  DICOMWEB_URL: optionalPeerBaseUrl('DICOMWEB_TOKEN'),
  /** Order alerts and dead letters to a person (JSON POST through the outbox); a credential. */
  ALERT_WEBHOOK_URL: optionalUrl(['http:', 'https:']).refine(
    (v) => v === undefined || (!new URL(v).username && !new URL(v).password),
    'must not carry user information (put a token in the path or query)',
  ),
  /** Further dead-letter alerts of a destination and reason within this are one follow-up; 0: one each. */
  ALERT_COALESCE_SECONDS: seconds(300, true),
  // Results back to the clinic (src/outbound, docs/results.md).
  OUTBOUND_ENABLED: bool(true),
  OUTBOUND_POLL_MS: milliseconds(250),
  OUTBOUND_CONCURRENCY: positiveInt(4),
  OUTBOUND_MAX_ATTEMPTS: positiveInt(10),
  /** A results PDF larger than this goes to the EHR and the RIS as a reference, not inside. */
  OUTBOUND_PDF_EMBED_MAX_BYTES: positiveInt(5 * 1024 * 1024),
  OUTBOUND_BACKOFF_BASE_MS: milliseconds(2000),
  OUTBOUND_BACKOFF_MAX_MS: milliseconds(600_000),
  OUTBOX_CLAIM_LEASE_SECONDS: seconds(30),
  /** A destination whose oldest pending delivery is older is `degraded` in /health. */
  OUTBOUND_DEGRADED_AFTER_SECONDS: seconds(900),
  RIS_MLLP_TIMEOUT_SECONDS: seconds(30),
  RIS_MLLP_TLS: bool(false),
  RIS_MLLP_TLS_CA_FILE: z.string().min(1).optional(),
  RIS_HL7_VERSION: z
    .string()
    .regex(/^2\.[3-9](\.\d)?$/, 'must be an HL7 v2 version such as 2.5.1')
    .optional(),
  RIS_ORM_STATUS_MESSAGES: bool(false),
  RIS_SENDING_APPLICATION: z.string().min(1).default('IMAGING-AI-ADAPTER'),
  RIS_SENDING_FACILITY: z.string().min(1).default('ADAPTER'),
  RIS_REPORT_TEXT_TYPE: z.enum(['TX', 'FT']).default('TX'),
  AI_DEVICE_MANUFACTURER: z.string().min(1).default('Imaging Analysis Service'),
  AI_DEVICE_VERSION: z.string().min(1).default('unknown'),
  DICOMWEB_TOKEN: z.string().min(1).optional(),
  STUDY_QUIET_PERIOD_SECONDS: seconds(60),
  /** Identifiers a study must share with its order (docs/security.md); `none` is not offered. */
  STUDY_IDENTITY_MATCH: commaList((t) => t.toLowerCase())
    .pipe(
      z
        .array(z.enum(['accession-number', 'accession-issuer', 'patient-id', 'patient-id-issuer']))
        .min(
          1,
          'name accession-number and/or patient-id (and accession-issuer, patient-id-issuer)',
        ),
    )
    .default(['accession-number', 'accession-issuer', 'patient-id', 'patient-id-issuer']),
  STUDY_UNMATCHED_HOLD_MINUTES: positiveInt(24 * 60),
  STOW_MAX_REQUEST_BYTES: positiveInt(4 * 1024 * 1024 * 1024),
  /** Most parts (instances) one STOW-RS request may hold. */
  STOW_MAX_INSTANCES: positiveInt(10_000),
  /**
   * Refused parts kept byte for byte per STOW-RS request or C-STORE association; the others
   * are audited by reason, size and SHA-256 only (each kept one is a file for the hold).
   */
  STOW_MAX_KEPT_REFUSED: positiveInt(20),
  /** Refused files kept under DATA_DIR/studies/refused at once, all senders together. */
  STOW_MAX_KEPT_REFUSED_TOTAL: positiveInt(1000),
  /**
   * Pushed instances that match no order held at once, per sender (STOW-RS token, C-STORE
   * calling AE) and all senders together; past either, a new unmatched instance is refused
   * (A700) and a matching one still taken. Each held one is a file and a row for the hold.
   */
  STUDY_MAX_HELD_UNMATCHED_PER_SENDER: positiveInt(50_000),
  STUDY_MAX_HELD_UNMATCHED_TOTAL: positiveInt(200_000),
  DICOM_SCP_PORT: optionalPort,
  // A PACS reached over DIMSE query/retrieve (docs/studies.md, "DIMSE query/retrieve").
  PACS_DIMSE_HOST: z.string().trim().min(1).optional(),
  PACS_DIMSE_PORT: optionalPort,
  PACS_DIMSE_AE_TITLE: z
    .string()
    .trim()
    .regex(/^[\x20-\x5b\x5d-\x7e]{1,16}$/, 'must be 1-16 characters, no backslash')
    .optional(),
  PACS_DIMSE_RETRIEVE: z.enum(['move', 'get']).default('move'),
  PACS_DIMSE_TIMEOUT_SECONDS: seconds(30),
  PACS_DIMSE_RETRIEVE_TIMEOUT_SECONDS: seconds(3600),
  PACS_DIMSE_MAX_INSTANCES: positiveInt(10_000),
  /** Largest study pulled over WADO-RS (QIDO-RS count, then while streaming). */
  DICOMWEB_MAX_INSTANCES: positiveInt(10_000),
  DICOMWEB_MAX_BYTES: positiveInt(4 * 1024 * 1024 * 1024),
  PACS_DIMSE_MAX_BYTES: positiveInt(4 * 1024 * 1024 * 1024),
  /** Bind address of the C-STORE SCP; default MLLP_HOST (the hospital-side front door). */
  DICOM_SCP_HOST: z.string().min(1).optional(),
  DICOM_SCP_AE_TITLE: z
    .string()
    .trim()
    .regex(/^[\x20-\x5b\x5d-\x7e]{1,16}$/, 'must be 1-16 characters, no backslash')
    .default('IMAGING-ADAPTER'),
  DICOM_SCP_CALLING_AE_TITLES: commaList().optional(),
  /** Connections our C-STORE SCP keeps open at once; more are closed at once. */
  DICOM_SCP_MAX_ASSOCIATIONS: positiveInt(64),
  /** C-STORE SCP connections one peer address holds at once; more are closed as they arrive. */
  DICOM_SCP_MAX_ASSOCIATIONS_PER_CLIENT: positiveInt(16),
  /** Silence (or time to complete a PDU) after which the C-STORE SCP aborts a connection. */
  DICOM_SCP_TIMEOUT_SECONDS: seconds(60),
  POLL_INTERVAL_SECONDS: seconds(300),
  API_TOKENS: apiTokens,
  API_TOKENS_FILE: z.string().optional(),
  CONFIG_FILE: z.string().optional(),
  DATA_DIR: z.string().default('.data'),
  /** Below this much free space in DATA_DIR, /health says degraded (storage). */
  DATA_DIR_MIN_FREE_BYTES: positiveInt(1024 * 1024 * 1024),
  RUN_MIGRATIONS: bool(true),
  JOBS_ENABLED: bool(true),
  JOB_CONCURRENCY: positiveInt(4),
  JOB_WORKER_DEAD_AFTER_SECONDS: seconds(30),
  AUDIT_RETENTION_DAYS: positiveInt(365),
});

export type EnvConfig = z.infer<typeof envSchema>;

export interface AppConfig extends EnvConfig {
  site: SiteConfig;
  /** True when IMAGING_BASE_URL is unset: the sandbox runs in-process. */
  useEmbeddedSandbox: boolean;
  /** True when DATABASE_URL is unset: an embedded PostgreSQL runs in-process. */
  useEmbeddedDatabase: boolean;
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/** Reads and validates the configuration; throws ConfigError listing every problem. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): AppConfig {
  // White space around a value is dropped (a Kubernetes secret or a file read into the
  // environment ends in a newline); empty strings mean "unset" (docker-compose and systemd
  // often pass VAR=).
  const cleaned = Object.fromEntries(
    Object.entries(env)
      .map(([k, v]) => [k, v?.trim()] as const)
      .filter(([, v]) => v !== undefined && v !== ''),
  );
  const parsed = envSchema.safeParse(cleaned);
  const problems: string[] = [
    ...nearMissProblems(
      Object.keys(env),
      Object.keys(envSchema.shape),
      (setting) => cleaned[setting] !== undefined,
    ),
  ];
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      const name = issue.path.join('.');
      const raw = cleaned[name];
      const shown = raw === undefined || isSecretName(name) ? '' : ` (got ${shownValue(raw)})`;
      problems.push(`${name}: ${issue.message}${shown}`);
    }
  }
  let site: SiteConfig = {};
  if (cleaned.CONFIG_FILE) {
    try {
      site = readSiteConfig(cleaned.CONFIG_FILE);
    } catch (error) {
      problems.push(`CONFIG_FILE: ${(error as Error).message}`);
    }
  }
  if (parsed.success)
    problems.push(...crossFieldProblems(parsed.data), ...fileProblems(parsed.data));
  problems.push(...siteMappingProblems(site));
  if (problems.length > 0 || !parsed.success) throw new ConfigError(problems);
  const useEmbeddedSandbox = parsed.data.IMAGING_BASE_URL === undefined;
  // Nothing configured (`npm start` on a fresh machine, the README's quick start): a pushed
  // study is packaged after 5 quiet seconds and the sandbox is polled every 15 s (the
  // lifecycle tick runs each minute), so a first order reaches its end within minutes.
  const quickStart = useEmbeddedSandbox && parsed.data.DATABASE_URL === undefined;
  return {
    ...parsed.data,
    STUDY_QUIET_PERIOD_SECONDS:
      cleaned.STUDY_QUIET_PERIOD_SECONDS === undefined && quickStart
        ? 5
        : parsed.data.STUDY_QUIET_PERIOD_SECONDS,
    POLL_INTERVAL_SECONDS:
      cleaned.POLL_INTERVAL_SECONDS === undefined && quickStart
        ? 15
        : parsed.data.POLL_INTERVAL_SECONDS,
    // What is in effect, so that the start-up dump shows it: with the in-process sandbox an
    // order note picks the sandbox's path, and test processing IDs are accepted.
    IMAGING_SANDBOX_OUTCOME_FROM_NOTES:
      parsed.data.IMAGING_SANDBOX_OUTCOME_FROM_NOTES || useEmbeddedSandbox,
    HL7_PROCESSING_IDS: parsed.data.HL7_PROCESSING_IDS ?? (useEmbeddedSandbox ? ['P', 'T'] : ['P']),
    site,
    useEmbeddedSandbox,
    useEmbeddedDatabase: parsed.data.DATABASE_URL === undefined,
  };
}
