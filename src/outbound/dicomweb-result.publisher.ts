import { randomBytes } from 'node:crypto';
import { Agent, request } from 'undici';
import { buildEncapsulatedPdf } from './dicom-result.builder';
import { SrBuildOffload } from './dicom-sr.offload';
import { DESTINATIONS } from './outbound.settings';
import { redirectMeaning } from './redirect-answer';
import type { LoadedPublication } from './publication.loader';
import { dicomTagDump } from './dicom-tag-dump';
import { type DeliveryResult, exchangeText, type OutboxItem, type Publisher } from './publisher';
import { BodyTooLargeError, readBodyText } from '../common/bounded-body';
import { parseRetryAfter } from '../common/retry-after';
import { describeStowFailure, stowFailureReason } from '../mappings/stow-failure-reasons';
import { failedSops } from './stow-answer';

/** The most of a PACS's STOW-RS answer we read. */
const STOW_ANSWER_MAX_BYTES = 1024 * 1024;

/**
 * What of a Failed SOP Sequence an attempt records: its first items (detail), its first distinct
 * reasons (the answer: summary, last_error, the dead letter's reason). We send one instance; a
 * PACS or proxy naming 3,000 failures with as many reasons had every one in the detail and the
 * summary (over 100 KB each, at every attempt).
 */
const MAX_RECORDED_FAILURES = 20;
const MAX_NAMED_REASONS = 3;

/** The distinct failure reasons, the first MAX_NAMED_REASONS named and the rest counted. */
function reasonsOf(failures: ReadonlyArray<{ reason?: number }>): string {
  const reasons = [...new Set(failures.map((f) => describeStowFailure(f.reason)))];
  const more = reasons.length - MAX_NAMED_REASONS;
  return `${reasons.slice(0, MAX_NAMED_REASONS).join(', ')}${more > 0 ? ` and ${more} more reasons` : ''}`;
}

export interface DicomWebPublisherOptions {
  /** DICOMweb root (DICOMWEB_URL), e.g. http://pacs/dicom-web. */
  baseUrl: string;
  bearerToken?: string;
  timeoutMs?: number;
  clock?: () => Date;
  /** Where SRs are built (a worker thread by default: ./dicom-sr.offload.ts). */
  srBuilder?: SrBuildOffload;
}

/**
 * The SR and the encapsulated PDF to the PACS by STOW-RS (PS3.18 10.5): one
 * multipart/related; type="application/dicom" POST to /studies/{StudyInstanceUID}. 200 is
 * stored; 202 is stored with warnings (recorded); 409 (every instance refused) and other 4xx
 * are dead letters with the Failed SOP Sequence reasons, unless every reason is A7xx (out of
 * resources); that, 408/429/5xx and network errors retry.
 * Its own connection pool, as the DICOMweb client's (src/studies/dicomweb.client.ts): never
 * the process-wide dispatcher, which Node's fetch replaces with its bundled, older undici.
 */
export class DicomWebResultPublisher implements Publisher {
  readonly destination = DESTINATIONS.dicom;
  private readonly agent = new Agent({ keepAliveTimeout: 10_000 });
  private readonly srBuilder: SrBuildOffload;

  constructor(private readonly options: DicomWebPublisherOptions) {
    this.srBuilder = options.srBuilder ?? new SrBuildOffload();
  }

  async deliver(item: OutboxItem, loaded: LoadedPublication): Promise<DeliveryResult> {
    const { input, source } = loaded;
    if (!source || !input.dicom) {
      return {
        outcome: 'dead',
        answer: 'no source study known for this order: nothing to attach the SR/PDF to',
        detail: {},
      };
    }
    const now = (this.options.clock ?? (() => new Date()))();
    let part10: Buffer;
    let sent: ReturnType<typeof dicomTagDump>;
    let cuts: string[] = [];
    if (item.kind === 'dicom-sr') {
      // off the event loop: a report of 300 findings is about 1 s of dcmjs CPU
      ({ part10, sent, cuts } = await this.srBuilder.build(input, source, now));
    } else if (item.kind === 'dicom-pdf') {
      if (!input.pdf) return { outcome: 'dead', answer: 'no PDF report stored', detail: {} };
      part10 = buildEncapsulatedPdf(input, source, input.pdf, now, cuts);
      sent = dicomTagDump(part10);
    } else {
      return { outcome: 'dead', answer: `unknown kind ${item.kind}`, detail: {} };
    }
    const sopInstanceUid =
      item.kind === 'dicom-sr' ? input.dicom.srInstanceUid : input.dicom.pdfInstanceUid;
    const result = await this.store(part10, item.kind, sopInstanceUid, source);
    // A patient or study value written shorter than it came (a name past PN's 64 bytes) is
    // recorded with the attempt (outbound.attempt), as the ORU's cuts are.
    const quirks = cuts.map((detail) => ({ code: 'value-cut-to-type', detail }));
    return {
      ...result,
      ...(quirks.length > 0 ? { detail: { ...result.detail, quirks } } : {}),
      sent,
    };
  }

  private async store(
    part10: Buffer,
    kind: string,
    sopInstanceUid: string,
    source: NonNullable<LoadedPublication['source']>,
  ): Promise<DeliveryResult> {
    const boundary = `iaa-${randomBytes(12).toString('hex')}`;
    const body = Buffer.concat([
      Buffer.from(`--${boundary}\r\nContent-Type: application/dicom\r\n\r\n`),
      part10,
      Buffer.from(`\r\n--${boundary}--\r\n`),
    ]);
    const url = `${this.options.baseUrl.replace(/\/$/, '')}/studies/${source.attributes.studyInstanceUid}`;
    const started = Date.now();
    let status: number;
    let text: string;
    let retryAfter: string | string[] | undefined;
    let contentType: string | undefined;
    let location: string | undefined;
    try {
      const res = await request(url, {
        method: 'POST',
        headers: {
          'content-type': `multipart/related; type="application/dicom"; boundary=${boundary}`,
          accept: 'application/dicom+json',
          ...(this.options.bearerToken
            ? { authorization: `Bearer ${this.options.bearerToken}` }
            : {}),
        },
        body,
        signal: AbortSignal.timeout(this.options.timeoutMs ?? 60_000),
        dispatcher: this.agent,
      });
      status = res.statusCode;
      retryAfter = res.headers['retry-after'];
      contentType = [res.headers['content-type']].flat()[0];
      // a redirect is never followed (DICOMWEB_TOKEN goes to DICOMWEB_URL only): named in the answer
      if (status >= 300 && status < 400) location = [res.headers.location].flat()[0];
      // a STOW-RS answer is a short DICOM JSON (PS3.18 §10.5.3): 1 MiB is far above it
      text = await readBodyText(res.body, STOW_ANSWER_MAX_BYTES).catch((error: unknown) =>
        error instanceof BodyTooLargeError ? error.message : '',
      );
    } catch (error) {
      return {
        outcome: 'retry',
        answer: `the PACS could not be reached (${(error as Error).name})`,
        detail: { error: (error as Error).message.slice(0, 200) },
      };
    }
    const response = {
      status,
      ...exchangeText(
        /\bxml\b/i.test(contentType ?? '') ? 'application/dicom+xml' : 'application/dicom+json',
        text,
      ),
    };
    const failures = failedSops(contentType, text);
    const detail = {
      httpStatus: status,
      sopInstanceUid,
      bytes: part10.length,
      ...(failures.length > 0
        ? {
            // a UID is at most 64 characters (PS3.5 §9.1): what a PACS wrote past it is not one
            failedSops: failures.slice(0, MAX_RECORDED_FAILURES).map((f) => ({
              ...f,
              ...(f.sopInstanceUid ? { sopInstanceUid: f.sopInstanceUid.slice(0, 64) } : {}),
            })),
            ...(failures.length > MAX_RECORDED_FAILURES ? { failedSopCount: failures.length } : {}),
          }
        : {}),
      latencyMs: Date.now() - started,
    };
    const label = kind === 'dicom-sr' ? 'SR' : 'encapsulated PDF';
    // A 2xx page for a browser (a login portal, a proxy's error page) is not the PACS storing
    // the instance (PS3.18 10.5.3 answers DICOM JSON or XML): not taken as delivered.
    if (status >= 200 && status < 300 && /^\s*text\/html\b/i.test(contentType ?? '')) {
      return {
        outcome: 'retry',
        answer: `the PACS answered ${status} to the ${label} with an HTML page, not a STOW-RS answer; not taken as stored`,
        detail: { ...detail, contentType: 'text/html' },
        response: { status, ...exchangeText('text/html', text) },
      };
    }
    if ((status === 200 || status === 202) && failures.length === 0) {
      return {
        outcome: 'delivered',
        answer: `${label} stored by the PACS (${status})`,
        detail,
        response,
      };
    }
    // 0x0111 Duplicate SOP instance (PS3.4 C.4.2.1.4), Azure's 45070: a resend of what the
    // PACS already holds (src/mappings/stow-failure-reasons.ts).
    const classes = failures.map((f) => stowFailureReason(f.reason).class);
    if (failures.length > 0 && classes.every((c) => c === 'held')) {
      return {
        outcome: 'delivered',
        answer: `${label} already held by the PACS`,
        detail,
        response,
      };
    }
    // A7xx Refused: Out of Resources (PS3.4 Annex GG / C.4.2.1.4): a full PACS that later has
    // room stores it, so every refusal being that (or another that passes) is retried, not a
    // dead letter at once.
    const passing = failures.length > 0 && classes.every((c) => c !== 'refused');
    // 401/403: DICOMWEB_TOKEN or the PACS's configuration, which an operator fixes: retried
    // (as the DICOMweb pull does), not a dead letter for every result of the outage.
    const refusedCredentials = status === 401 || status === 403;
    const transient =
      status === 408 ||
      status === 424 || // Failed Dependency: the PACS could not reach its own storage (Azure)
      status === 429 ||
      status >= 500 ||
      passing ||
      refusedCredentials;
    const retryAfterMs = transient ? parseRetryAfter(retryAfter, Date.now()) : undefined;
    return {
      outcome: transient ? 'retry' : 'dead',
      ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
      answer: `the PACS answered ${status} to the ${label}${redirectMeaning(status, location, this.options.baseUrl, 'DICOMWEB_URL')}${failures.length ? ` (${failures.length} refused: ${reasonsOf(failures)})` : ''}`,
      detail,
      response,
    };
  }

  async close(): Promise<void> {
    await Promise.all([this.agent.close(), this.srBuilder.close()]);
  }
}
