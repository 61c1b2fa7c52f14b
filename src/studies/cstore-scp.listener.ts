import { randomUUID } from 'node:crypto';
import { createWriteStream, type WriteStream } from 'node:fs';
import { mkdirSync } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import { once } from 'node:events';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import {
  association as dimseAssociation,
  constants,
  Dataset,
  log as dimseLog,
  requests,
  responses,
  Scp,
  Server,
} from 'dcmjs-dimse';
import type { Logger } from 'pino';
import { leadingMetaElements } from './dataset-meta-elements';
import { fileMetaInformation } from './part10-meta';
import {
  checkInstanceFile,
  FAILURE_REASON,
  JPIP_REFERENCED_SYNTAXES,
  type SopUids,
} from './dicom-instance.validator';
import { guardPduLength, MAX_PDU_BYTES } from './dimse-pdu-guard';
import { noteRefusedSubOperation } from './dimse-pull';
import { isDicomUid } from './dicom-uid';
import type { RefusedInstance, RefusedTally, StowService } from './stow.service';
import type { StudyStoragePaths } from './study-storage.paths';

/**
 * A DICOM C-STORE SCP (PS3.4 Annex B, PS3.7 §9.1.1) for PACS that route only over DIMSE.
 * Each instance is streamed straight to a Part 10 file (a File Meta Information header we
 * write, then the data set bytes as received, in the negotiated transfer syntax: nothing
 * is re-encoded), then goes through the same validation and intake as STOW-RS. The C-STORE
 * response is sent only after the instance is committed.
 */

type Association = dimseAssociation.Association;
type PresentationContext = dimseAssociation.PresentationContext;
type CStoreRequest = requests.CStoreRequest;

const { PresentationContextResult, RejectResult, RejectSource, RejectReason, Status } = constants;

// The library logs every PDU to the console at info level, and its errors too; ours is the
// service log (network errors reach it through the networkError event).
dimseLog.setLevel('silent');

const VERIFICATION = '1.2.840.10008.1.1';
/** Storage SOP Classes live under this root (PS3.4 Table B.5-1, PS3.6 Annex A). */
const STORAGE_ROOT = '1.2.840.10008.5.1.4.1.1.';
/**
 * We keep bytes as sent; deflate would have to be inflated first (refused by validation too).
 * A JPIP referenced syntax leaves the pixels on the sender's JPIP server: declined, so a sender
 * that proposed it first sends the pixel data in another syntax it proposed (now that the
 * first proposed is taken).
 */
const REFUSED_SYNTAXES = new Set(['1.2.840.10008.1.2.1.99', ...JPIP_REFERENCED_SYNTAXES]);
/**
 * Transfer syntaxes of the standard (PS3.5 §10, PS3.6 Table A-1): each is explicit VR little
 * endian on the wire but implicit VR little endian and explicit VR big endian, as the instance
 * check reads them. A private one (GE's 1.2.840.113619.5.2, implicit VR with big endian pixel
 * data) is not: accepted because it was proposed first, every instance sent in it was refused
 * C000 after the transfer, where DCMTK's storescp declines it at negotiation and the sender
 * uses the standard syntax it proposed beside it.
 */
const STANDARD_SYNTAX = /^1\.2\.840\.10008\.1\.2(\.[0-9]+)*$/;

export interface CStoreScpOptions {
  port: number;
  /** Bind address (DICOM_SCP_HOST); loopback unless configured. */
  host?: string;
  /** Our AE title; associations calling another title are refused. */
  aeTitle: string;
  /** When set, only these calling AE titles may send. */
  callingAeTitles?: readonly string[];
  /**
   * The AE title of the DIMSE PACS we C-MOVE from (PACS_DIMSE_AE_TITLE). Only an association
   * it calls from may deliver our moves' sub-operations; unset: nothing is taken as one.
   */
  moveSourceAeTitle?: string;
  /** Largest PDU read (default MAX_PDU_BYTES). */
  maxPduBytes?: number;
  /**
   * Connections open at once (DICOM_SCP_MAX_ASSOCIATIONS, default 64); one more is closed at
   * once, so a flood cannot take the file descriptors the HTTP and MLLP listeners and the
   * database pool need.
   */
  maxAssociations?: number;
  /**
   * Connections open at once from one peer address (DICOM_SCP_MAX_ASSOCIATIONS_PER_CLIENT,
   * default all of `maxAssociations`); one more is closed at once. One address held every slot
   * with silent connections, renewed each DICOM_SCP_TIMEOUT_SECONDS.
   */
  maxAssociationsPerClient?: number;
  /**
   * Silence, or time to complete a PDU, after which a connection is aborted
   * (DICOM_SCP_TIMEOUT_SECONDS, default 60 s): an idle peer gives its slot back.
   */
  timeoutMs?: number;
  /**
   * Largest data set one C-STORE may bring (STOW_MAX_REQUEST_BYTES, as a STOW-RS request):
   * past it the association is aborted while it arrives and its file removed.
   */
  maxInstanceBytes?: number;
  stow: StowService;
  paths: StudyStoragePaths;
  logger: Logger;
}

/**
 * The refused data sets of one association, audited together: one `study.received` entry
 * when the association is released or closes, or once AUDIT_BATCH are waiting, or
 * AUDIT_DELAY_MS after the first (a long association is not audited only at its end). Each
 * refused store was an entry of its own: a sender at a limit wrote one row per data set.
 */
const AUDIT_BATCH = 1000;
const AUDIT_DELAY_MS = 10_000;

/** What an association's intake refused: the kept-file tally and the entries to audit. */
interface AssociationRefusals {
  tally: RefusedTally;
  add(refused: RefusedInstance): void;
}

export class CStoreScpListener {
  private server?: Server;
  /** Associations admitted and not yet settled (their intakes over, their refusals audited). */
  private readonly associations = new Set<{ settle(): Promise<void> }>();

  constructor(private readonly options: CStoreScpOptions) {}

  start(): void {
    const { aeTitle, callingAeTitles, moveSourceAeTitle, stow, paths, logger } = this.options;
    mkdirSync(paths.incomingDir, { recursive: true, mode: 0o700 });
    const refusals = new RefusalThrottle();
    const refuse = (detail: {
      reason: string;
      callingAe: string;
      calledAe: string;
      peer: string;
    }) => {
      logger.warn(detail, 'DICOM association refused');
      const alsoRefused = refusals.admit(`${detail.peer}|${detail.callingAe}|${detail.reason}`);
      if (alsoRefused === undefined) return;
      void stow
        .recordRefusedAssociation({ ...detail, ...(alsoRefused > 0 ? { alsoRefused } : {}) })
        .catch((e: Error) =>
          logger.error({ err: e.message }, 'audit of a refused association failed'),
        );
    };
    const maxPduBytes = this.options.maxPduBytes ?? MAX_PDU_BYTES;
    const maxAssociations = this.options.maxAssociations ?? 64;
    const timeoutMs = this.options.timeoutMs ?? 60_000;
    const maxInstanceBytes = this.options.maxInstanceBytes ?? 4 * 1024 ** 3;
    const maxPerClient = this.options.maxAssociationsPerClient ?? maxAssociations;
    let open = 0;
    const openByPeer = new Map<string, number>();
    const associations = this.associations;

    class AdapterScp extends Scp {
      private callingAe = '';
      private calledAe = '';
      private readonly peer: string;
      private readonly staged = new Map<CStoreRequest, string>();
      /** Group 0002 elements dropped from a staged data set (dataset-meta-elements.ts). */
      private readonly metaDropped = new Map<CStoreRequest, number>();
      /** Refused data sets this association kept (STOW_MAX_KEPT_REFUSED), and to audit. */
      private readonly refusals: AssociationRefusals = {
        tally: { kept: 0 },
        add: (refused) => {
          this.unaudited.push(refused);
          if (this.unaudited.length >= AUDIT_BATCH) void this.auditRefused();
          else
            this.auditTimer ??= setTimeout(() => void this.auditRefused(), AUDIT_DELAY_MS).unref();
        },
      };
      private readonly unaudited: RefusedInstance[] = [];
      private auditTimer?: NodeJS.Timeout;
      private audited: Promise<void> = Promise.resolve();
      /** Instances handed to intake and not yet answered. */
      private readonly intakes = new Set<Promise<unknown>>();
      private readonly socket: ConstructorParameters<typeof Scp>[0];

      constructor(...args: ConstructorParameters<typeof Scp>) {
        super(...args);
        const socket = args[0];
        this.socket = socket;
        this.peer = socket.remoteAddress ?? 'unknown';
        const peer = this.peer;
        const fromPeer = openByPeer.get(peer) ?? 0;
        if (open >= maxAssociations || fromPeer >= maxPerClient) {
          socket.destroy();
          refuse({
            reason:
              open >= maxAssociations
                ? `more than ${maxAssociations} connections open (DICOM_SCP_MAX_ASSOCIATIONS): closed`
                : `more than ${maxPerClient} connections open from ${peer} (DICOM_SCP_MAX_ASSOCIATIONS_PER_CLIENT): closed`,
            callingAe: '',
            calledAe: '',
            peer,
          });
          return;
        }
        open++;
        openByPeer.set(peer, fromPeer + 1);
        associations.add(this);
        socket.once('close', () => {
          open--;
          const left = (openByPeer.get(peer) ?? 1) - 1;
          if (left > 0) openByPeer.set(peer, left);
          else openByPeer.delete(peer);
        });
        // Before the library reads a byte: it would hold any PDU whole, however large, and
        // it never closes a connection that goes quiet (see guardPduLength).
        guardPduLength(
          socket,
          maxPduBytes,
          (claimed) =>
            refuse({
              reason: `a PDU of ${claimed} bytes (more than ${maxPduBytes}): aborted`,
              callingAe: this.callingAe,
              calledAe: this.calledAe,
              peer: this.peer,
            }),
          {
            timeoutMs,
            onTimeout: (reason) =>
              refuse({
                reason,
                callingAe: this.callingAe,
                calledAe: this.calledAe,
                peer: this.peer,
              }),
          },
        );
        // An association that ends (released, aborted, broken) before a staged instance was
        // handed over leaves no part file behind.
        this.on('close', () => {
          void this.settle().finally(() => associations.delete(this));
          for (const path of this.staged.values()) void rm(path, { force: true });
          this.staged.clear();
          this.metaDropped.clear();
        });
      }

      override associationRequested(association: Association): void {
        this.callingAe = printableAe(association.getCallingAeTitle());
        this.calledAe = printableAe(association.getCalledAeTitle());
        const who = { callingAe: this.callingAe, calledAe: this.calledAe, peer: this.peer };
        if (association.getCalledAeTitle().trim() !== aeTitle) {
          refuse({ reason: 'called AE title not recognized', ...who });
          this.sendAssociationReject(
            RejectResult.Permanent,
            RejectSource.ServiceUser,
            RejectReason.CalledAeNotRecognized,
          );
          return;
        }
        if (callingAeTitles && !callingAeTitles.includes(this.callingAe)) {
          refuse({ reason: 'calling AE title not in DICOM_SCP_CALLING_AE_TITLES', ...who });
          this.sendAssociationReject(
            RejectResult.Permanent,
            RejectSource.ServiceUser,
            RejectReason.CallingAeNotRecognized,
          );
          return;
        }
        for (const { id } of association.getPresentationContexts()) {
          const context = association.getPresentationContext(id);
          const abstract = context.getAbstractSyntaxUid();
          if (abstract !== VERIFICATION && !abstract.startsWith(STORAGE_ROOT)) {
            context.setResult(PresentationContextResult.RejectAbstractSyntaxNotSupported);
            continue;
          }
          const proposed = context
            .getTransferSyntaxUids()
            .filter((ts) => STANDARD_SYNTAX.test(ts) && !REFUSED_SYNTAXES.has(ts));
          // The sender's first choice among those we take (it lists them in its order of
          // preference, PS3.8 §9.3.2.2.1): files are
          // stored as received, so a modality holding JPEG images keeps them. Preferring
          // explicit VR little endian made such a sender decompress each image to send it, and
          // one that cannot (storescu with no codec for the conversion) failed the store.
          const chosen = proposed[0];
          if (chosen) context.setResult(PresentationContextResult.Accept, chosen);
          else context.setResult(PresentationContextResult.RejectTransferSyntaxesNotSupported);
        }
        this.sendAssociationAccept();
      }

      /**
       * The peer aborted (A-ABORT received): the connection is closed at once, as the acceptor
       * does on an A-ABORT (PS3.8 §7.3.4, §9.1.6), so its slot is given back. The library only
       * reports it; the connection stayed open until the peer gave up (storescu --abort: its
       * ACSE timeout, 30 s) or DICOM_SCP_TIMEOUT_SECONDS, and the slot with it.
       */
      override abort(source: number, reason: number): void {
        logger.info(
          { callingAe: this.callingAe, peer: this.peer, source, reason },
          'DICOM association aborted by the peer: connection closed',
        );
        this.socket.destroy();
      }

      override associationReleaseRequested(): void {
        // Audited before the release is answered: the sender's store is over when the entry is in.
        void this.auditRefused().finally(() => this.sendAssociationReleaseResponse());
      }

      /**
       * Waits for the intakes under way, then audits what they and the others refused: when
       * the connection closes, and when the service stops (before the database closes).
       */
      settle(): Promise<void> {
        return Promise.allSettled([...this.intakes]).then(() => this.auditRefused());
      }

      /** Writes the refusals not yet audited as one entry (in turn, never two at once). */
      private auditRefused(): Promise<void> {
        clearTimeout(this.auditTimer);
        this.auditTimer = undefined;
        const batch = this.unaudited.splice(0);
        if (batch.length === 0) return this.audited;
        const sender = `dicom:${this.callingAe}`;
        this.audited = this.audited
          .then(() => stow.file([], 'c-store', sender, batch))
          .then(
            () => undefined,
            (e: Error) =>
              logger.error({ err: e.message }, 'audit of refused C-STORE data sets failed'),
          );
        return this.audited;
      }

      override cEchoRequest(
        request: requests.CEchoRequest,
        callback: (response: responses.CEchoResponse) => void,
      ): void {
        const response = responses.CEchoResponse.fromRequest(request);
        response.setStatus(Status.Success);
        callback(response);
      }

      /** The data set goes to disk as it arrives, behind a File Meta Information header. */
      override createStoreWritableStream(
        context: PresentationContext,
        request: CStoreRequest,
      ): Writable {
        // The header first: the command's UIDs are input too (several values, not text), and
        // nothing may fail once the file exists. Validation judges the data set's own UIDs.
        const syntax = context.getAcceptedTransferSyntaxUid() ?? '1.2.840.10008.1.2';
        const header = fileMetaInformation(
          commandText(request.getAffectedSopClassUid()),
          commandText(request.getAffectedSopInstanceUid()),
          syntax,
        );
        const encoding =
          syntax === '1.2.840.10008.1.2'
            ? 'implicit-le'
            : syntax === '1.2.840.10008.1.2.2'
              ? 'explicit-be'
              : 'explicit-le';
        const callingAe = this.callingAe;
        const metaDropped = this.metaDropped;
        const path = join(paths.incomingDir, `${randomUUID()}.part`);
        const stream: WriteStream = createWriteStream(path, { mode: 0o600 });
        stream.write(header);
        this.staged.set(request, path);
        // Counted as it arrives: there was no limit, and one endless C-STORE filled DATA_DIR.
        let bytes = 0;
        let over = false;
        const tooLarge = () => {
          over = true;
          refuse({
            reason: `a C-STORE data set of more than ${maxInstanceBytes} bytes (STOW_MAX_REQUEST_BYTES): aborted`,
            callingAe: this.callingAe,
            calledAe: this.calledAe,
            peer: this.peer,
          });
          this.sendAbort();
          this.socket.destroy();
        };
        // The data set's first bytes are held until any group 0002 elements a sender put in
        // it (dataset-meta-elements.ts) are seen whole, and written without them.
        let head: Buffer | null = Buffer.alloc(0);
        const withoutMetaElements = (chunk: Buffer, complete: boolean): Buffer | null => {
          if (head === null) return chunk;
          head = Buffer.concat([head, chunk]);
          const found = leadingMetaElements(head, encoding, complete);
          if (found === 'need-more' && head.length < 64 * 1024) return null;
          const end = found === 'need-more' ? 0 : found.end;
          if (found !== 'need-more' && found.elements > 0) {
            metaDropped.set(request, found.elements);
            logger.warn(
              { callingAe, elements: found.elements },
              'C-STORE data set carried group 0002 elements (File Meta Information): dropped',
            );
          }
          const rest = head.subarray(end);
          head = null;
          return rest;
        };
        return new Writable({
          write(chunk: Buffer, _encoding, callback) {
            bytes += chunk.length;
            if (!over && bytes > maxInstanceBytes) tooLarge();
            const data = over ? null : withoutMetaElements(chunk, false);
            if (over || stream.destroyed || data === null) callback();
            else if (stream.write(data)) callback();
            else stream.once('drain', () => callback());
          },
          final(callback) {
            const rest = over ? null : withoutMetaElements(Buffer.alloc(0), true);
            if (rest !== null && rest.length > 0 && !stream.destroyed) stream.write(rest);
            if (stream.closed) return callback();
            stream.once('close', () => callback());
            stream.end();
          },
          destroy(error, callback) {
            stream.destroy();
            callback(error);
          },
        });
      }

      override createDatasetFromStoreWritableStream(
        writable: Writable,
        context: PresentationContext,
        callback: (dataset: Dataset) => void,
      ): void {
        // The library has ended the stream; hand over once the file is complete. The data
        // set itself stays on disk (the request only carries a placeholder).
        const done = () => callback(new Dataset({}, context.getAcceptedTransferSyntaxUid()));
        if (writable.closed) done();
        else once(writable, 'close').then(done, done);
      }

      override cStoreRequest(
        request: CStoreRequest,
        callback: (response: responses.CStoreResponse) => void,
      ): void {
        const path = this.staged.get(request);
        this.staged.delete(request);
        const dropped = this.metaDropped.get(request) ?? 0;
        this.metaDropped.delete(request);
        const answer = (status: number) => {
          const response = responses.CStoreResponse.fromRequest(request);
          response.setStatus(status);
          callback(response);
        };
        if (!path) {
          answer(Status.ProcessingFailure);
          return;
        }
        // A sub-operation of our own C-MOVE (PS3.7 §9.1.1.1: Move Originator AE Title) is kept
        // for the retrieve that asked for it, not matched like a pushed instance — only when the
        // PACS we move from sends it: anyone can write our AE title into a C-STORE command, and
        // an instance slipped into a move would be packaged unaudited (or make it fail).
        const originator = commandText(
          request.getCommandDataset().getElement('MoveOriginatorApplicationEntityTitle'),
        ).trim();
        const fromMoveSource =
          moveSourceAeTitle !== undefined && this.callingAe === moveSourceAeTitle;
        const handle = originator === aeTitle && fromMoveSource ? intakeMoved : intake;
        const sop: SopUids = {
          sopClassUid: commandText(request.getAffectedSopClassUid()),
          sopInstanceUid: commandText(request.getAffectedSopInstanceUid()),
        };
        const quirks =
          dropped > 0
            ? [`${dropped} group 0002 element(s) in the data set (File Meta Information) dropped`]
            : [];
        const answered = handle(path, this.callingAe, sop, quirks, this.refusals).then(
          answer,
          (error: unknown) => {
            logger.error({ err: (error as Error).message }, 'C-STORE intake failed');
            void rm(path, { force: true });
            answer(FAILURE_REASON.processingFailure);
          },
        );
        this.intakes.add(answered);
        const over = () => void this.intakes.delete(answered);
        answered.then(over, over);
      }
    }

    /** Validates and files one received instance; returns the C-STORE status (PS3.4 Table B.2-1). */
    const intake = async (
      path: string,
      callingAe: string,
      sop: SopUids,
      quirks: string[],
      refusals: AssociationRefusals,
    ): Promise<number> => {
      const check = await checkInstanceFile(path, { expectedSop: sop });
      if (!check.ok) {
        refusals.add({ ...check, ...(await stow.keepRefused(path, refusals.tally)) });
        // Our failure reasons are C-STORE statuses too: A7xx, A9xx, Cxxx.
        return check.failureReason;
      }
      const filed = await stow.file(
        [{ header: check.header, tempPath: path, sizeBytes: check.sizeBytes, quirks }],
        'c-store',
        `dicom:${callingAe}`,
        [],
        undefined,
        false,
      );
      // Matching no order while the held-instance limit is reached: A700, out of resources.
      const overLimit = filed.refused[0];
      if (!overLimit) return Status.Success;
      refusals.add(overLimit);
      return overLimit.failureReason;
    };

    /**
     * Studies a DIMSE retrieve of ours is moving, as last asked (positive answers only, for a
     * few seconds): one query per study, not one per instance of a large move.
     */
    const moving = new Map<string, number>();
    const moveUnderWay = async (studyInstanceUid: string): Promise<boolean> => {
      const now = Date.now();
      if ((moving.get(studyInstanceUid) ?? 0) > now) return true;
      if (!(await stow.dimseRetrieveUnderWay(studyInstanceUid))) return false;
      if (moving.size >= 1000) moving.clear();
      moving.set(studyInstanceUid, now + MOVE_UNDER_WAY_CACHE_MS);
      return true;
    };

    /** Validates a C-MOVE sub-operation and files it under the moved/ directory of its study. */
    const intakeMoved = async (
      path: string,
      callingAe: string,
      sop: SopUids,
      _quirks: string[],
      refusals: AssociationRefusals,
    ): Promise<number> => {
      const check = await checkInstanceFile(path, { expectedSop: sop });
      if (!check.ok) {
        // Kept and audited as a pushed refusal is (it was deleted without a word), and noted
        // for the retrieve, which fails naming it instead of moving the study again and again.
        const kept = await stow.keepRefused(path, refusals.tally);
        // Noted only while a retrieve of that study is under way (else no retrieve reads it),
        // and at most MAX_REFUSAL_NOTES_PER_STUDY of a study: a note for every refusal, of any
        // study, left files without limit until the hourly sweep.
        const forOurRetrieve =
          isDicomUid(check.studyInstanceUid) && (await moveUnderWay(check.studyInstanceUid));
        if (!forOurRetrieve) {
          // audited with the association's other refusals (one entry, not one per data set)
          refusals.add({ ...check, ...kept });
          return check.failureReason;
        }
        // Audited at once, not with the association's other refusals: the retrieve that fails
        // naming it may read the audit before the PACS releases the association.
        await stow.file([], 'c-store', `dicom:${callingAe}`, [{ ...check, ...kept }]);
        await noteRefusedSubOperation(paths, check.studyInstanceUid!, {
          reason: check.reason,
          failureReason: check.failureReason,
          ...(kept.keptAs ? { keptAs: kept.keptAs } : {}),
        });
        return check.failureReason;
      }
      // Only a move we are making is filed: one of a study no retrieve of ours is moving (a
      // peer calling with the PACS's AE title, which is no credential; a late sub-operation of
      // a move that broke off) was filed for any study without limit, and nothing took it.
      if (!(await moveUnderWay(check.header.studyInstanceUid))) {
        refusals.add({
          failureReason: NOT_AUTHORIZED,
          reason: 'a C-MOVE sub-operation of a study no retrieve of ours is moving',
          sopClassUid: check.header.sopClassUid,
          sopInstanceUid: check.header.sopInstanceUid,
          ...(await stow.keepRefused(path, refusals.tally)),
        });
        return NOT_AUTHORIZED;
      }
      const target = paths.movedFile(
        check.header.studyInstanceUid,
        check.header.seriesInstanceUid,
        check.header.sopInstanceUid,
      );
      await mkdir(paths.movedDir(check.header.studyInstanceUid), { recursive: true, mode: 0o700 });
      await rename(path, target);
      return Status.Success;
    };

    this.server = new Server(AdapterScp);
    this.server.on('networkError', (e: Error) =>
      logger.warn({ err: e.message }, 'C-STORE SCP network error'),
    );
    // dcmjs-dimse hands its first argument to net.Server.listen(), which also takes
    // { port, host }: that is how the SCP binds to DICOM_SCP_HOST instead of every interface.
    const host = this.options.host ?? '127.0.0.1';
    this.server.listen({ port: this.options.port, host } as unknown as number);
    if (!callingAeTitles || callingAeTitles.length === 0) {
      logger.warn(
        { port: this.options.port },
        'C-STORE SCP accepts any calling AE title: set DICOM_SCP_CALLING_AE_TITLES to the PACS/modalities that may send',
      );
    }
    logger.info({ port: this.options.port, host, aeTitle }, 'C-STORE SCP listening');
  }

  /**
   * Stops listening and closes every connection, then waits for each association's intakes
   * under way and audits its refusals not yet written: the service stops before the database
   * closes, and a refusal batched for the release (or AUDIT_DELAY_MS) was lost with it.
   */
  async stop(): Promise<void> {
    this.server?.close();
    this.server = undefined;
    await Promise.all([...this.associations].map((association) => association.settle()));
  }
}

/** C-STORE status 0124, Refused: Not Authorized (PS3.7 Annex C): a move we did not ask for. */
const NOT_AUTHORIZED = 0x0124;
/** How long a study found being moved is taken as still moved without asking again. */
const MOVE_UNDER_WAY_CACHE_MS = 5_000;

/** A command element's value as text: several values joined by `\`, anything else empty. */
export function commandText(value: unknown): string {
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) return value.map((v) => (typeof v === 'string' ? v : '')).join('\\');
  return '';
}

/** An AE title as sent, for logs and the audit log: spaces trimmed, other controls shown as `?`. */
function printableAe(value: string): string {
  return value.trim().replace(/[^\x20-\x7e]/g, '?');
}

/**
 * One audit entry per peer, calling AE and reason a minute at most: a flood of refused
 * associations is logged, not written 10,000 times. `admit` answers how many were held back
 * since the last entry, or undefined to hold this one back.
 */
class RefusalThrottle {
  private readonly last = new Map<string, { at: number; held: number }>();
  admit(key: string, now = Date.now()): number | undefined {
    const seen = this.last.get(key);
    if (seen && now - seen.at < 60_000) {
      seen.held++;
      return undefined;
    }
    if (this.last.size > 1000) this.last.clear();
    this.last.set(key, { at: now, held: 0 });
    return seen?.held ?? 0;
  }
}
