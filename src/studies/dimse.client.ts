import { createWriteStream, type WriteStream } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import { once } from 'node:events';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import {
  Client,
  constants,
  Dataset,
  log as dimseLog,
  requests,
  responses,
  type association as dimseAssociation,
} from 'dcmjs-dimse';
import { commandText, fileMetaInformation } from './cstore-scp.listener';
import type { QidoStudy, RetrievedFile } from './dicomweb.client';
import { StudyError } from './study.error';
import { hasMatchingCharacters } from './study-identity';

/**
 * A DIMSE query/retrieve SCU (PS3.4 Annex C, Study Root) for PACS without DICOMweb:
 * C-FIND at STUDY level for the study and its Number of Study Related Instances, then
 * C-MOVE to our own C-STORE SCP or C-GET with the instances on the same association
 * (streamed to disk as Part 10 files, the data set bytes as received).
 */

const { Status, RejectResult, RejectReason } = constants;
type Response = responses.Response;
type PresentationContext = dimseAssociation.PresentationContext;

dimseLog.setLevel('silent');

/** Statuses a retrieve may end with (PS3.4 Table C.4-2 / C.4-3, PS3.7 Annex C). */
const PENDING = new Set([0xff00, 0xff01]);
const SUCCESS = 0x0000;
const SUB_OPERATIONS_WARNING = 0xb000;
const CANCELLED = 0xfe00;

export interface DimseClientOptions {
  host: string;
  port: number;
  /** The PACS's AE title (PACS_DIMSE_AE_TITLE). */
  calledAeTitle: string;
  /** Ours (DICOM_SCP_AE_TITLE): calling AE of our associations and the C-MOVE destination. */
  callingAeTitle: string;
  /** Connect, association and between-PDU timeout. */
  timeoutMs?: number;
  /** Whole C-MOVE / C-GET, from association to final response. */
  retrieveTimeoutMs?: number;
  /** C-GET: more instances or bytes than this aborts the association (too_large). */
  maxInstances?: number;
  maxBytes?: number;
}

/** The final C-MOVE / C-GET response, as counts (PS3.7 §9.1.4.1 / §9.1.3.1). */
export interface RetrieveOutcome {
  status: number;
  completed: number;
  failed: number;
  warnings: number;
}

export class DimseClient {
  constructor(readonly options: DimseClientOptions) {}

  get retrieveTimeoutMs(): number {
    return this.options.retrieveTimeoutMs ?? 60 * 60_000;
  }

  /** Study-root C-FIND by Study Instance UID, else accession; exact values only. */
  async findStudies(query: {
    studyInstanceUid?: string | null;
    accessionNumber?: string | null;
  }): Promise<QidoStudy[]> {
    const value = query.studyInstanceUid ?? query.accessionNumber;
    if (!value) return [];
    // A matching character would widen the query to other patients' studies (PS3.4
    // §C.2.2.2.4): never sent, whatever the order holds (intake refuses such accessions).
    if (hasMatchingCharacters(value))
      throw new StudyError(
        'invalid_study',
        'the order identifier holds DICOM matching characters (* ? \\); not queried',
      );
    const request = new requests.CFindRequest();
    // Only the keys we need: no names or birth dates asked for (PS3.4 §C.6.2.1 Study Root).
    request.setDataset(
      new Dataset({
        QueryRetrieveLevel: 'STUDY',
        StudyInstanceUID: query.studyInstanceUid ?? '',
        AccessionNumber: query.studyInstanceUid ? '' : (query.accessionNumber ?? ''),
        PatientID: '',
        NumberOfStudyRelatedInstances: '',
        NumberOfStudyRelatedSeries: '',
      }),
    );
    const found: QidoStudy[] = [];
    const final = await this.run(request, 'C-FIND', this.timeoutMs * 2, (response) => {
      const elements = response.getDataset()?.getElements() as Record<string, unknown> | undefined;
      if (!elements) return;
      const uid = text(elements.StudyInstanceUID);
      if (!uid) return;
      found.push({
        studyInstanceUid: uid,
        accessionNumber: text(elements.AccessionNumber),
        patientId: text(elements.PatientID),
        instanceCount: integer(elements.NumberOfStudyRelatedInstances),
        seriesCount: integer(elements.NumberOfStudyRelatedSeries),
      });
      if (found.length > 100) throw new StudyError('pacs_error', 'C-FIND matched over 100 studies');
    });
    if (final.getStatus() !== SUCCESS) throw statusError('C-FIND', final.getStatus());
    return found;
  }

  /** C-MOVE of a study to our own SCP (the PACS must know our AE title's host and port). */
  /**
   * C-MOVE of a study to our own SCP (the PACS must know our AE title's host and port).
   * Aborting `signal` aborts the association (the PACS stops its sub-operations); the
   * returned promise then rejects with the signal's reason.
   */
  async moveStudy(studyInstanceUid: string, signal?: AbortSignal): Promise<RetrieveOutcome> {
    const request = requests.CMoveRequest.createStudyMoveRequest(
      this.options.callingAeTitle,
      studyInstanceUid,
    );
    const final = await this.run(
      request,
      'C-MOVE',
      this.retrieveTimeoutMs,
      undefined,
      undefined,
      signal,
    );
    return outcomeOf(final);
  }

  /**
   * C-GET of a study: the PACS sends each instance as a C-STORE on our association (we propose
   * the Storage SOP Classes with the SCP role, PS3.7 §D.3.3.4). Each is written to
   * `<dir>/<n>.dcm`. On any failure the files written are removed and a StudyError thrown.
   */
  async getStudy(
    studyInstanceUid: string,
    dir: string,
  ): Promise<{ outcome: RetrieveOutcome; files: RetrievedFile[] }> {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const maxInstances = this.options.maxInstances ?? 10_000;
    const maxBytes = this.options.maxBytes ?? 4 * 1024 ** 3;
    const files: RetrievedFile[] = [];
    let bytes = 0;
    let tooLarge: StudyError | undefined;
    const open = new Set<WriteStream>();
    let diskError: StudyError | undefined;
    const request = requests.CGetRequest.createStudyGetRequest(studyInstanceUid);
    try {
      const final = await this.run(request, 'C-GET', this.retrieveTimeoutMs, undefined, {
        createStoreStream: (context, store, abort) => {
          const path = join(dir, `${String(files.length + 1).padStart(6, '0')}.dcm`);
          const file: RetrievedFile = { path, sizeBytes: 0, contentType: 'application/dicom' };
          files.push(file);
          const out: WriteStream = createWriteStream(`${path}.part`, { mode: 0o600 });
          open.add(out);
          out.once('close', () => open.delete(out));
          out.write(
            fileMetaInformation(
              commandText(store.getAffectedSopClassUid()),
              commandText(store.getAffectedSopInstanceUid()),
              context.getAcceptedTransferSyntaxUid() ?? '1.2.840.10008.1.2',
            ),
          );
          if (files.length > maxInstances) {
            tooLarge = new StudyError(
              'too_large',
              `the study has more than ${maxInstances} instances (PACS_DIMSE_MAX_INSTANCES)`,
            );
            abort();
          }
          // A disk error ends the retrieve; the library never sees an error event (it has no
          // listener for one), only a stream that swallows the rest of the instance.
          const diskFailed = (e: NodeJS.ErrnoException) => {
            // A write after the file was torn down (the association broke off and the
            // cleanup closed it) is a consequence of that failure, not a disk error: the
            // retrieve's own error (connection lost → wait and retry) must stand.
            if (e.code === 'ERR_STREAM_DESTROYED') return;
            diskError ??= new StudyError(
              'invalid_study',
              `cannot store a retrieved instance: ${e.message}`,
            );
            abort();
          };
          out.on('error', diskFailed);
          // Counts bytes as they arrive, so a study past the limit is cut off mid-transfer.
          return new Writable({
            write(chunk: Buffer, _enc, callback) {
              file.sizeBytes += chunk.length;
              bytes += chunk.length;
              if (bytes > maxBytes && !tooLarge) {
                tooLarge = new StudyError(
                  'too_large',
                  `the study is larger than ${maxBytes} bytes (PACS_DIMSE_MAX_BYTES)`,
                );
                abort();
              }
              if (out.destroyed || out.writableEnded) callback();
              else if (out.write(chunk)) callback();
              else out.once('drain', () => callback());
            },
            final(callback) {
              if (out.destroyed) return callback();
              out.end(() => {
                rename(`${path}.part`, path).then(
                  () => callback(),
                  (e: Error) => {
                    diskFailed(e);
                    callback();
                  },
                );
              });
            },
          });
        },
      });
      if (diskError) throw diskError;
      if (tooLarge) throw tooLarge;
      return { outcome: outcomeOf(final), files };
    } catch (error) {
      // An instance cut off mid-transfer: close its file before removing it.
      for (const out of open) out.destroy();
      await Promise.all(
        files.flatMap((f) => [rm(f.path, { force: true }), rm(`${f.path}.part`, { force: true })]),
      );
      throw tooLarge ?? diskError ?? error;
    }
  }

  private get timeoutMs(): number {
    return this.options.timeoutMs ?? 30_000;
  }

  /**
   * One association with one request: resolves with the final response, or rejects with a
   * StudyError (pacs_unavailable when trying again may help).
   */
  private run(
    request: requests.Request,
    what: string,
    deadlineMs: number,
    onPending?: (response: Response) => void,
    store?: {
      createStoreStream(
        context: PresentationContext,
        request: requests.CStoreRequest,
        abort: () => void,
      ): Writable;
    },
    signal?: AbortSignal,
  ): Promise<Response> {
    const { host, port, callingAeTitle, calledAeTitle } = this.options;
    return new Promise<Response>((resolve, reject) => {
      const client = new Client();
      let final: Response | undefined;
      let failure: StudyError | undefined;
      let settled = false;
      const finish = () => {
        if (settled) return;
        settled = true;
        clearTimeout(deadline);
        if (failure) reject(failure);
        else if (final) resolve(final);
        else
          reject(
            new StudyError(
              'pacs_unavailable',
              `PACS connection lost during ${what}: the association ended before the final answer`,
            ),
          );
      };
      const abort = (error: StudyError) => {
        failure ??= error;
        try {
          client.abort();
        } catch {
          // not connected yet
        }
        // Some peers never close after an abort: give them a moment, then end anyway.
        setTimeout(finish, 2000).unref();
      };
      const deadline = setTimeout(
        () =>
          abort(
            new StudyError('pacs_unavailable', `${what}: no final answer within ${deadlineMs} ms`),
          ),
        deadlineMs,
      );
      // dcmjs-dimse ends a request on any status but 0xFF00, also on 0xFF01 (pending: optional
      // keys not supported, PS3.4 §C.4.1.1.4, which a PACS answers when it lacks
      // NumberOfStudyRelatedInstances): it would release the association after the first
      // match. Here only a final status ends the request.
      const done = request as unknown as { raiseDoneEvent(): void };
      const raiseDone = done.raiseDoneEvent.bind(request);
      done.raiseDoneEvent = () => {
        if (final) raiseDone();
      };
      request.on('response', (response: Response) => {
        const status = response.getStatus();
        if (PENDING.has(status)) {
          try {
            onPending?.(response);
          } catch (error) {
            abort(error as StudyError);
          }
          return;
        }
        final = response;
      });
      client.on('associationRejected', (rejection: { result: number; reason: number }) => {
        failure ??= new StudyError(
          'pacs_unavailable',
          `the PACS rejected the association (${rejection.result === RejectResult.Permanent ? 'permanent' : 'transient'}, ${rejectReason(rejection.reason)})`,
        );
      });
      client.on('networkError', (error: Error) => {
        // After the final answer (a peer that resets instead of releasing) nothing is lost.
        if (final) return;
        failure ??= new StudyError(
          'pacs_unavailable',
          `PACS unreachable or connection lost during ${what}: ${error.message.replace(/^.*?-> /, '')}`,
          { cause: error },
        );
      });
      client.on('cStoreRequest', (storeRequest: requests.CStoreRequest, callback) => {
        const response = responses.CStoreResponse.fromRequest(storeRequest);
        response.setStatus(store && !failure ? Status.Success : Status.ProcessingFailure);
        callback(response);
      });
      client.on('closed', finish);
      signal?.addEventListener('abort', () =>
        abort(
          signal.reason instanceof StudyError
            ? signal.reason
            : new StudyError('pacs_unavailable', `${what} aborted`),
        ),
      );
      client.addRequest(request);
      try {
        client.send(host, port, callingAeTitle, calledAeTitle, {
          connectTimeout: this.timeoutMs,
          associationTimeout: this.timeoutMs,
          pduTimeout: this.timeoutMs,
        });
      } catch (error) {
        failure = new StudyError('pacs_unavailable', `${what}: ${(error as Error).message}`);
        finish();
        return;
      }
      if (store) {
        // The library keeps a received data set in memory by default; C-GET instances go to
        // disk as they arrive instead, through the same hooks its SCP offers
        // (createStoreWritableStream), set on this association's network object.
        const network = (client as unknown as { network?: Record<string, unknown> }).network;
        if (!network) throw new Error('dcmjs-dimse Client has no network after send()');
        network.createStoreWritableStream = (
          context: PresentationContext,
          storeRequest: requests.CStoreRequest,
        ) =>
          store.createStoreStream(context, storeRequest, () =>
            abort(failure ?? new StudyError('too_large', 'limit reached')),
          );
        network.createDatasetFromStoreWritableStream = (
          writable: Writable,
          context: PresentationContext,
          callback: (dataset: Dataset) => void,
        ) => {
          const done = () => callback(new Dataset({}, context.getAcceptedTransferSyntaxUid()));
          if (writable.writableFinished) done();
          else once(writable, 'finish').then(done, done);
        };
      }
    });
  }
}

/** A retrieve's final status as counts, or a StudyError for the statuses that end it. */
function outcomeOf(final: Response): RetrieveOutcome {
  const r = final as responses.CMoveResponse;
  return {
    status: final.getStatus(),
    completed: r.getCompleted?.() ?? 0,
    failed: r.getFailures?.() ?? 0,
    warnings: r.getWarnings?.() ?? 0,
  };
}

/**
 * Judges a retrieve's outcome: success with every sub-operation completed, or a StudyError.
 * Transient (waiting): out of resources, sub-operations failed, cancelled, move destination
 * unknown (an operator registers our AE at the PACS). Anything else is the PACS refusing the
 * request itself (failed).
 */
export function checkRetrieveOutcome(what: string, outcome: RetrieveOutcome): void {
  if (outcome.status === SUCCESS && outcome.failed === 0) return;
  if (outcome.status === SUB_OPERATIONS_WARNING || outcome.failed > 0)
    throw new StudyError(
      'pacs_unavailable',
      `${what} incomplete: ${outcome.failed} of ${outcome.completed + outcome.failed + outcome.warnings} sub-operation(s) failed (status ${hex(outcome.status)}); not packaged`,
    );
  throw statusError(what, outcome.status);
}

/**
 * PS3.4 Table C.4-1..C.4-3: what a status means, PHI-free. Most are worth waiting for: out of
 * resources, cancelled, and the PACS refusing to process or not knowing the move destination
 * are configuration an operator fixes (Orthanc 1.10 answers an unknown destination with 0xC000,
 * later versions with 0xA801). Only a request the PACS cannot serve at all fails the order.
 */
export function statusError(what: string, status: number): StudyError {
  const meaning = describeStatus(status);
  const permanent = status === 0xa900 || status === 0x0122;
  return new StudyError(
    permanent ? 'pacs_error' : 'pacs_unavailable',
    `${what} answered ${hex(status)} (${meaning})${status === 0x0122 && what === 'C-GET' ? '; set PACS_DIMSE_RETRIEVE=move' : ''}`,
  );
}

function describeStatus(status: number): string {
  if (status === 0xa801) return 'move destination unknown: the PACS does not know our AE title';
  if (status === 0xa701 || status === 0xa702 || (status & 0xff00) === 0xa700)
    return 'out of resources';
  if (status === 0xa900) return 'identifier does not match SOP class';
  if (status === CANCELLED) return 'cancelled';
  if (status === SUB_OPERATIONS_WARNING) return 'sub-operations complete with failures';
  if (status === 0x0122) return 'SOP class not supported';
  if ((status & 0xf000) === 0xc000) return 'unable to process';
  return 'failure';
}

function rejectReason(reason: number): string {
  switch (reason) {
    case RejectReason.CalledAeNotRecognized:
      return 'called AE title not recognized';
    case RejectReason.CallingAeNotRecognized:
      return 'calling AE title not recognized';
    default:
      return `reason ${reason}`;
  }
}

function hex(status: number): string {
  return `0x${status.toString(16).toUpperCase().padStart(4, '0')}`;
}

function text(value: unknown): string | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  return typeof v === 'string' && v.trim() !== '' ? v.trim() : undefined;
}

function integer(value: unknown): number | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  const n = typeof v === 'number' ? v : typeof v === 'string' && v.trim() !== '' ? Number(v) : NaN;
  return Number.isInteger(n) ? n : undefined;
}
