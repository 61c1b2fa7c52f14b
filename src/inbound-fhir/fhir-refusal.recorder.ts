import type { OperationOutcomeIssue } from '@medplum/fhirtypes';
import type { Logger } from 'pino';
import { recordRefusal, type RefusalSink } from '../common/refusal';
import type { ToleratedQuirk } from '../domain/order-request';
import type { RejectionInput } from '../orders/order-intake.service';
import { assertJsonMediaType, bodyStalled, bodyTooLarge, negotiate } from './fhir-http';
import type { FhirCaller } from './fhir-operation.shared';
import { FHIR_JSON } from './fhir-operation.shared';
import { fhirBodies } from './fhir-request.context';
import { FhirError } from './fhir.error';

type FhirTransport = 'fhir-rest' | 'fhir-subscription';

const WHAT: Record<FhirTransport, string> = {
  'fhir-rest': 'refused FHIR request',
  'fhir-subscription': 'refused notification',
};

/** Issues as the analyst's problem list (PHI-free: locations, codes, diagnostics). */
export function problemsOf(
  issues: OperationOutcomeIssue[],
  fallback: string,
): RejectionInput['problems'] {
  return issues.map((i) => ({
    location: i.expression?.[0],
    code: String(i.code),
    message: i.diagnostics ?? i.details?.text ?? fallback,
  }));
}

/**
 * The one place where refused FHIR input is kept (the raw bytes, the OperationOutcome
 * answered, why), for both the REST API and Subscription notifications.
 */
export class FhirRefusalRecorder {
  constructor(
    private readonly intake: RefusalSink<RejectionInput>,
    private readonly logger: Logger,
  ) {}

  async record(
    caller: FhirCaller,
    transport: FhirTransport,
    messageType: string | null,
    error: FhirError,
    quirks: ToleratedQuirk[] = [],
  ): Promise<void> {
    const input: RejectionInput = {
      transport,
      sender: caller.sender,
      remoteAddress: caller.remoteAddress,
      messageType,
      messageControlId: null,
      raw: caller.raw,
      contentType: caller.contentType,
      quirks,
      response: {
        code: String(error.httpStatus),
        body: Buffer.from(JSON.stringify(error.toOperationOutcome())),
        contentType: FHIR_JSON,
        accepted: false,
      },
      problems: problemsOf(error.issues, error.message),
      ...(caller.ifNoneExist === undefined ? {} : { ifNoneExist: caller.ifNoneExist }),
    };
    await recordRefusal(this.intake, input, this.logger, WHAT[transport]);
  }

  /**
   * Runs a REST operation; a FhirError it throws (except 5xx) is stored as a rejected message,
   * then rethrown.
   */
  async keeping<T>(
    caller: FhirCaller,
    messageType: string,
    fn: () => Promise<T>,
    quirks: () => ToleratedQuirk[] = () => [],
  ): Promise<T> {
    try {
      // the body's head is kept with the 413: it was answered and nothing kept
      if (caller.tooLarge !== undefined) throw bodyTooLarge(caller.tooLarge);
      if (caller.stalled !== undefined) throw bodyStalled(caller.stalled);
      assertJsonMediaType(caller.contentType, caller.raw, {
        contentEncoding: caller.contentEncoding,
      });
      if (caller.wants) negotiate(caller.wants.format, caller.wants.accept);
      return await fhirBodies.run(caller.raw.length, fn);
    } catch (caught) {
      let error = caught;
      // A TypeError while reading the body means a shape the structure validator let through
      // (e.g. an object where a string belongs): the input is refused (422), not the service.
      if (caught instanceof TypeError) {
        this.logger.warn({ messageType, err: caught.message }, 'fhir body could not be read');
        error = new FhirError('invalid', `the resource could not be read: ${caught.message}`);
      }
      if (error instanceof FhirError && error.httpStatus < 500) {
        await this.record(caller, 'fhir-rest', messageType, error, quirks());
      }
      throw error;
    }
  }
}
