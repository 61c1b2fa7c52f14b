import { once } from 'node:events';
import type { Writable } from 'node:stream';
import {
  Client,
  constants,
  Dataset,
  log as dimseLog,
  responses,
  type association as dimseAssociation,
  type requests,
} from 'dcmjs-dimse';
import { PENDING } from './dimse-status';
import { StudyError } from './study.error';

/**
 * One DIMSE association carrying one request (dcmjs-dimse as SCU): the deadline, aborts,
 * rejections and lost connections as StudyErrors, pending answers handed over one by one,
 * and for C-GET the C-STORE sub-operations on the same association streamed to the caller.
 */

const { Status, RejectResult, RejectReason } = constants;

/**
 * C-GET: the compressed transfer syntaxes (PS3.5 §A.4, PS3.6 Table A-1) a PACS may hold an
 * image in and send it so: JPEG baseline, JPEG lossless SV1, JPEG-LS lossless and near-lossless,
 * JPEG 2000 lossless and lossy, RLE. With the native syntaxes alone a PACS had to decompress,
 * and one without the codec (Orthanc has no JPEG 2000) failed every sub-operation. An acceptor
 * takes one syntax per presentation context, so each is its own context, for the study's SOP
 * classes only (an association proposes at most 128 contexts; dcmjs-dimse's C-GET already
 * takes 60). Deflate and the JPIP referenced syntaxes are not proposed: the C-STORE SCP
 * declines them too.
 */
export const CGET_COMPRESSED_SYNTAXES: readonly string[] = [
  '1.2.840.10008.1.2.4.50',
  '1.2.840.10008.1.2.4.70',
  '1.2.840.10008.1.2.4.80',
  '1.2.840.10008.1.2.4.81',
  '1.2.840.10008.1.2.4.90',
  '1.2.840.10008.1.2.4.91',
  '1.2.840.10008.1.2.5',
];
const MAX_PRESENTATION_CONTEXTS = 128;

interface ProposedAssociation {
  getPresentationContexts(): Array<{ id: number }>;
  addPresentationContext(abstractSyntaxUid: string): number;
  addTransferSyntaxToPresentationContext(pcId: number, transferSyntaxUid: string): void;
  getPresentationContext(pcId: number): PresentationContext;
}

/** The compressed contexts of `sopClasses`, each with the SCP role, within the 128 contexts. */
function proposeCompressed(association: ProposedAssociation, sopClasses: readonly string[]): void {
  for (const sopClass of sopClasses) {
    const room = MAX_PRESENTATION_CONTEXTS - association.getPresentationContexts().length;
    if (room < CGET_COMPRESSED_SYNTAXES.length) return;
    for (const syntax of CGET_COMPRESSED_SYNTAXES) {
      const id = association.addPresentationContext(sopClass);
      association.addTransferSyntaxToPresentationContext(id, syntax);
      association.getPresentationContext(id).setProviderRole(true);
    }
  }
}
type Response = responses.Response;
export type PresentationContext = dimseAssociation.PresentationContext;

dimseLog.setLevel('silent');

/** Who we talk to, as whom, and the connect, association and between-PDU timeout. */
export interface AssociationPeer {
  host: string;
  port: number;
  calledAeTitle: string;
  callingAeTitle: string;
  timeoutMs: number;
}

export interface AssociationHooks {
  /** Each pending answer (e.g. a C-FIND match); throwing a StudyError aborts the association. */
  onPending?: (response: Response) => void;
  /** C-GET: where each instance the PACS sends goes; `abort` ends the association. */
  store?: {
    /**
     * The study's Storage SOP Classes (C-FIND SOPClassesInStudy): each is also proposed in
     * the compressed syntaxes, one presentation context per syntax (see CGET_COMPRESSED_SYNTAXES).
     */
    sopClasses?: readonly string[];
    createStoreStream(
      context: PresentationContext,
      request: requests.CStoreRequest,
      abort: () => void,
    ): Writable;
  };
  /** Aborting it aborts the association (the PACS stops its sub-operations). */
  signal?: AbortSignal;
}

/**
 * One association with one request: resolves with the final response, or rejects with a
 * StudyError (pacs_unavailable when trying again may help).
 */
export function runAssociation(
  peer: AssociationPeer,
  request: requests.Request,
  what: string,
  deadlineMs: number,
  { onPending, store, signal }: AssociationHooks = {},
): Promise<Response> {
  const { host, port, callingAeTitle, calledAeTitle, timeoutMs } = peer;
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
        connectTimeout: timeoutMs,
        associationTimeout: timeoutMs,
        pduTimeout: timeoutMs,
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
      const sopClasses = store.sopClasses ?? [];
      if (sopClasses.length > 0) {
        // dcmjs-dimse builds the request with the native syntaxes and sends it once connected;
        // the compressed contexts (with the SCP role, which its extra contexts do not carry)
        // join it just before it goes.
        const sendRequest = (network.sendAssociationRequest as (a: unknown) => void).bind(network);
        network.sendAssociationRequest = (association: ProposedAssociation) => {
          proposeCompressed(association, sopClasses);
          sendRequest(association);
        };
      }
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
