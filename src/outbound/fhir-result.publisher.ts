import type { Resource } from '@medplum/fhirtypes';
import type { DataSource } from 'typeorm';
import { parseRetryAfter } from '../common/retry-after';
import { type FhirHttpAnswer, FhirRestClient, searchUrl } from '../fhir/fhir-rest.client';
import { containedIssues, validateFhirResource } from '../fhir/fhir-validator';
import {
  buildDiagnosticReport,
  buildTask,
  reportIdentifier,
  taskIdentifier,
} from '../mappings/fhir-result.mapping';
import {
  errorIssueTypes,
  issuesSayTransient,
  REFUSAL_MEANINGS,
  RETRIED_CLIENT_STATUSES,
} from '../mappings/fhir-refusals.table';
import { PublicationRepository } from '../persistence/publication.repository';
import { DESTINATIONS } from './outbound.settings';
import { redirectMeaning } from './redirect-answer';
import type { LoadedPublication } from './publication.loader';
import { type DeliveryResult, exchangeText, type OutboxItem, type Publisher } from './publisher';

/** Bearer tokens from SMART Backend Services (src/fhir/smart-backend.auth.ts). */
export interface FhirTokenSource {
  token(): Promise<string>;
  invalidate(): void;
}

export interface FhirPublisherOptions {
  baseUrl: string;
  bearerToken?: string;
  /** When set, each request carries a SMART token (renewed once after a 401). */
  smart?: FhirTokenSource;
  timeoutMs?: number;
  /** Off only in the test that shows the EHR itself refusing an invalid resource. */
  validate?: boolean;
  dataSource?: DataSource;
}

/**
 * Task and DiagnosticReport to the EHR (FHIR_SERVER_URL) with FhirRestClient (a deadline for
 * the whole exchange, a bounded answer, no redirects), as conditional
 * updates on our identifier (`PUT Task?identifier=…`, R4 http.html#cond-update): the first
 * send creates, a resend updates. Each resource is validated with the R4 structure validator
 * (@medplum/core with the R4 definitions) before it leaves; an invalid one is a dead letter
 * with the validator's issues. Our own ServiceRequest (POSTed to our front door, no EHR holds
 * it) gets its status when the order ends.
 */
export class FhirResultPublisher implements Publisher {
  readonly destination = DESTINATIONS.fhir;
  private readonly client: FhirRestClient;

  constructor(private readonly options: FhirPublisherOptions) {
    this.client = new FhirRestClient({
      bearerToken: () => (options.smart ? options.smart.token() : options.bearerToken),
      timeoutMs: options.timeoutMs ?? 15_000,
    });
  }

  async deliver(item: OutboxItem, loaded: LoadedPublication): Promise<DeliveryResult> {
    const { input } = loaded;
    let resource: Resource;
    let identifier;
    if (item.kind === 'fhir-task') {
      resource = buildTask(input);
      identifier = taskIdentifier(input.orderId);
    } else if (item.kind === 'fhir-diagnostic-report') {
      resource = buildDiagnosticReport(input);
      identifier = reportIdentifier(input.orderId);
    } else {
      return { outcome: 'dead', answer: `unknown kind ${item.kind}`, detail: {} };
    }
    const sent = exchangeText('application/fhir+json', JSON.stringify(resource, null, 2));
    const result = await this.send(resource, identifier, loaded);
    return { ...result, sent };
  }

  private async send(
    resource: Resource,
    identifier: { system?: string; value?: string },
    loaded: LoadedPublication,
  ): Promise<DeliveryResult> {
    if (this.options.validate !== false) {
      const issues = [...validateFhirResource(resource), ...containedIssues(resource)];
      if (issues.length > 0) {
        return {
          outcome: 'dead',
          answer: `${resource.resourceType} failed R4 validation (${issues.length} issue(s)); not sent`,
          detail: {
            validation: issues.map((i) => ({
              code: i.code,
              expression: i.expression,
              diagnostics: i.details?.text ?? i.diagnostics,
            })),
          },
        };
      }
    }
    const started = Date.now();
    try {
      const saved = await this.put(resource, `${identifier.system}|${identifier.value}`);
      const problem = notStored(saved, resource.resourceType);
      if (problem) {
        // A 2xx that is not a FHIR server's answer (a proxy's or gateway's page, an error
        // OperationOutcome): the resource may not be stored, so it is not taken as delivered.
        const outcome = operationOutcomeOf(saved);
        return {
          outcome: 'retry',
          answer: `the EHR's success answer to ${resource.resourceType} is ${problem}; not taken as stored`,
          response: {
            status: 'not stored',
            ...exchangeText('application/fhir+json', JSON.stringify(saved, null, 2)),
          },
          detail: {
            resourceType: resource.resourceType,
            ...recordedIssues(outcome),
            latencyMs: Date.now() - started,
          },
        };
      }
      await this.updateOwnServiceRequest(loaded);
      return {
        outcome: 'delivered',
        response: {
          status: 'stored',
          ...exchangeText('application/fhir+json', JSON.stringify(saved, null, 2)),
        },
        answer: `${resource.resourceType} stored by the EHR`,
        detail: {
          resourceType: resource.resourceType,
          id: saved.id,
          versionId: saved.meta?.versionId,
          status: (resource as { status?: string }).status,
          latencyMs: Date.now() - started,
        },
      };
    } catch (error) {
      const response = (error as { response?: Partial<FhirHttpAnswer> }).response;
      const status = response?.status;
      const outcome = operationOutcomeOf(response?.data);
      // a 2xx here had a body that is not JSON (an HTML page): not stored, as above
      const success = status !== undefined && status >= 200 && status < 300;
      // 401/403: our credentials (a static FHIR_SERVER_TOKEN that expired, a SMART client the
      // EHR disabled) or the EHR's configuration, which an operator fixes: every result of an
      // outage was a dead letter at once, to be replayed by hand. Retried, as the PACS pull is.
      const refusedCredentials = status === 401 || status === 403;
      // a version conflict (409), or an OperationOutcome whose errors are all transient
      // (src/mappings/fhir-refusals.table.ts): retried, as a retry can pass; before, a dead letter
      const passing =
        status !== undefined &&
        status >= 400 &&
        (RETRIED_CLIENT_STATUSES.includes(status) || issuesSayTransient(outcome));
      const transient =
        status === undefined ||
        success ||
        refusedCredentials ||
        passing ||
        status === 408 ||
        status === 429 ||
        status >= 500;
      const body = response?.data;
      const retryAfterMs = transient
        ? parseRetryAfter(response?.retryAfter, Date.now())
        : undefined;
      return {
        outcome: transient ? 'retry' : 'dead',
        ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
        ...(status !== undefined
          ? {
              response: {
                status,
                ...exchangeText(
                  'application/fhir+json',
                  typeof body === 'string' ? body : JSON.stringify(body ?? null, null, 2),
                ),
              },
            }
          : {}),
        answer: status
          ? `the EHR answered ${status} to ${resource.resourceType}${success ? ' with a body that is not FHIR JSON; not taken as stored' : ''}${refusedCredentials ? ': our credentials were refused (FHIR_SERVER_TOKEN or the SMART client)' : ''}${redirectMeaning(status, response?.location, this.options.baseUrl, 'FHIR_SERVER_URL')}${refusalMeaning(status, resource.resourceType, outcome)}`
          : // our client's own words: unreachable, no complete answer in time, answer too large
            `no usable answer from the EHR to ${resource.resourceType}: ${(error as Error).message.slice(0, 200)}`,
        detail: {
          httpStatus: status ?? null,
          ...recordedIssues(outcome),
          ...(status === undefined ? { error: (error as Error).message.slice(0, 300) } : {}),
        },
      };
    }
  }

  /** Conditional update; with SMART, one retry with a fresh token after a 401 (revoked token). */
  private async put(resource: Resource, identifier: string): Promise<Resource> {
    const { smart } = this.options;
    for (let attempt = 0; ; attempt++) {
      try {
        // a 3xx is an answer, never a request with our token to wherever it points
        return await this.client.put<Resource>(
          searchUrl(this.options.baseUrl, resource.resourceType, { identifier }),
          resource,
        );
      } catch (error) {
        const status = (error as { response?: { status?: number } }).response?.status;
        if (status === 401 && smart && attempt === 0) {
          smart.invalidate();
          continue;
        }
        throw error;
      }
    }
  }

  private async updateOwnServiceRequest(loaded: LoadedPublication): Promise<void> {
    const { dataSource } = this.options;
    const id = loaded.ownServiceRequestId;
    const row = loaded.input.row;
    if (!dataSource || !id || !row.terminal) return;
    // R4 request-status: completed when results exist, revoked for a no-result end.
    const status = row.report === 'final' ? 'completed' : 'revoked';
    await new PublicationRepository(dataSource).setServiceRequestStatus(id, status);
  }

  async close(): Promise<void> {}
}

/**
 * Why a 2xx answer to a conditional update is not the EHR storing our resource, if it is not:
 * R4 http.html#update answers the resource (or nothing, as with `Prefer: return=minimal`); an
 * OperationOutcome is only information when none of its issues is an error.
 */
function notStored(answer: unknown, resourceType: string): string | undefined {
  if (answer === null || typeof answer !== 'object' || Array.isArray(answer))
    return 'not a FHIR resource';
  const type = (answer as { resourceType?: unknown }).resourceType;
  if (type === undefined)
    return Object.keys(answer).length === 0 ? undefined : 'not a FHIR resource';
  if (type === resourceType) return undefined;
  if (type === 'OperationOutcome') {
    const issues = (answer as { issue?: Array<{ severity?: string }> }).issue ?? [];
    const errors = issues.filter((i) => i?.severity === 'error' || i?.severity === 'fatal');
    return errors.length > 0 ? `an OperationOutcome with ${errors.length} error(s)` : undefined;
  }
  // the peer's text goes into the audit summary only when it looks like a resource type
  const named = typeof type === 'string' && /^[A-Z][A-Za-z]{0,63}$/.test(type);
  return named ? `a ${type}, not a ${resourceType}` : 'not a FHIR resource';
}

/** `: <what the status means> (OperationOutcome <issue types>)` for a 4xx, else nothing. */
function refusalMeaning(status: number, resourceType: string, issues: unknown): string {
  if (status < 400 || status >= 500 || status === 401 || status === 403) return '';
  const meaning = REFUSAL_MEANINGS[status]?.(resourceType);
  const types = errorIssueTypes(issues);
  const named = types.length > 0 ? `OperationOutcome ${types.join(', ')}` : '';
  if (meaning) return `: ${meaning}${named ? ` (${named})` : ''}`;
  return named ? `: ${named}` : '';
}

/**
 * What of an EHR's OperationOutcome an attempt records: its first 20 issues, each value within
 * 500 characters and 5 locations, and how many there were. A validating EHR answers one issue
 * per finding, thousands for a large DiagnosticReport against a strict profile: every one went
 * into the attempt's audit detail (5,000 issues, over 1 MB, at every attempt). The whole answer
 * stays in the exchange record, which bounds it (EXCHANGE_TEXT_LIMIT).
 */
const MAX_RECORDED_ISSUES = 20;

function recordedIssues(issues: unknown): Record<string, unknown> {
  if (issues === undefined) return {};
  if (!Array.isArray(issues)) return { operationOutcome: issues };
  const cut = (v: unknown): unknown =>
    typeof v === 'string'
      ? v.slice(0, 500)
      : Array.isArray(v)
        ? v.slice(0, 5).map(cut)
        : v && typeof v === 'object'
          ? Object.fromEntries(
              Object.entries(v)
                .slice(0, 10)
                .map(([k, x]) => [k, cut(x)]),
            )
          : v;
  return {
    operationOutcome: issues.slice(0, MAX_RECORDED_ISSUES).map(cut),
    ...(issues.length > MAX_RECORDED_ISSUES ? { operationOutcomeIssues: issues.length } : {}),
  };
}

function operationOutcomeOf(data: unknown): unknown {
  let value = data;
  if (typeof value === 'string') {
    try {
      value = JSON.parse(value);
    } catch {
      return undefined;
    }
  }
  if (
    value &&
    typeof value === 'object' &&
    (value as { resourceType?: string }).resourceType === 'OperationOutcome'
  ) {
    return (value as { issue?: unknown[] }).issue ?? [];
  }
  return undefined;
}
