import { createWriteStream, type WriteStream } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { Dataset, requests } from 'dcmjs-dimse';
import { commandText } from './cstore-scp.listener';
import { fileMetaInformation } from './part10-meta';
import type { QidoStudy, RetrievedFile } from './dicomweb.client';
import { runAssociation, type AssociationHooks, type AssociationPeer } from './dimse-association';
import { outcomeOf, statusError, SUCCESS, type RetrieveOutcome } from './dimse-status';
import { StudyError } from './study.error';
import { hasMatchingCharacters } from './study-identity';
import { withoutPadding } from '../mappings/dicom-identifiers';

/**
 * A DIMSE query/retrieve SCU (PS3.4 Annex C, Study Root) for PACS without DICOMweb:
 * C-FIND at STUDY level for the study and its Number of Study Related Instances, then
 * C-MOVE to our own C-STORE SCP or C-GET with the instances on the same association
 * (streamed to disk as Part 10 files, the data set bytes as received). One association per
 * request (dimse-association.ts); statuses in dimse-status.ts.
 */

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
    // Padding only is zero length to the PACS: a universal match (PS3.4 §C.2.2.2.3).
    if (value && withoutPadding(value) === '')
      throw new StudyError('invalid_study', 'the order identifier is blank; not queried');
    const request = new requests.CFindRequest();
    // Only the keys we need: no names or birth dates asked for (PS3.4 §C.6.2.1 Study Root).
    request.setDataset(
      new Dataset({
        ...queryCharacterSet(value),
        QueryRetrieveLevel: 'STUDY',
        StudyInstanceUID: query.studyInstanceUid ?? '',
        AccessionNumber: query.studyInstanceUid ? '' : (query.accessionNumber ?? ''),
        PatientID: '',
        IssuerOfPatientID: '',
        NumberOfStudyRelatedInstances: '',
        NumberOfStudyRelatedSeries: '',
      }),
    );
    const found: QidoStudy[] = [];
    const final = await this.run(request, 'C-FIND', this.timeoutMs * 2, {
      onPending: (response) => {
        const elements = response.getDataset()?.getElements() as
          Record<string, unknown> | undefined;
        if (!elements) return;
        const uid = text(elements.StudyInstanceUID);
        if (!uid) return;
        found.push({
          studyInstanceUid: uid,
          accessionNumber: identifierValue(elements.AccessionNumber),
          patientId: identifierValue(elements.PatientID),
          issuerOfPatientId: identifierValue(elements.IssuerOfPatientID),
          instanceCount: integer(elements.NumberOfStudyRelatedInstances),
          seriesCount: integer(elements.NumberOfStudyRelatedSeries),
        });
        if (found.length > 100)
          throw new StudyError('pacs_error', 'C-FIND matched over 100 studies');
      },
    });
    if (final.getStatus() !== SUCCESS) throw statusError('C-FIND', final.getStatus());
    return found;
  }

  /**
   * The Storage SOP Classes a study holds (study-level C-FIND, SOP Classes in Study
   * (0008,0062)), for the C-GET's compressed presentation contexts; when the PACS does not
   * answer that key, the image classes an AI study usually is (COMMON_IMAGE_CLASSES). A
   * failed lookup is not a failed retrieve: the C-GET then proposes the native syntaxes only.
   */
  private async sopClassesOf(studyInstanceUid: string): Promise<string[]> {
    const request = new requests.CFindRequest();
    request.setDataset(
      new Dataset({
        QueryRetrieveLevel: 'STUDY',
        StudyInstanceUID: studyInstanceUid,
        SOPClassesInStudy: '',
      }),
    );
    const classes = new Set<string>();
    try {
      const final = await this.run(request, 'C-FIND', this.timeoutMs * 2, {
        onPending: (response) => {
          const elements = response.getDataset()?.getElements() as
            Record<string, unknown> | undefined;
          const value = elements?.SOPClassesInStudy;
          for (const uid of Array.isArray(value) ? value : [value]) {
            const t = text(uid);
            if (t && /^[0-9.]{1,64}$/.test(t) && classes.size < 16) classes.add(t);
          }
        },
      });
      if (final.getStatus() !== SUCCESS) return [];
    } catch {
      return [];
    }
    return classes.size > 0 ? [...classes] : [...COMMON_IMAGE_CLASSES];
  }

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
    const final = await this.run(request, 'C-MOVE', this.retrieveTimeoutMs, { signal });
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
    const sopClasses = await this.sopClassesOf(studyInstanceUid);
    const request = requests.CGetRequest.createStudyGetRequest(studyInstanceUid);
    try {
      const final = await this.run(request, 'C-GET', this.retrieveTimeoutMs, {
        store: {
          sopClasses,
          createStoreStream: (context, store, abort) => {
            const path = join(dir, `${String(files.length + 1).padStart(6, '0')}.dcm`);
            const sop = {
              sopClassUid: commandText(store.getAffectedSopClassUid()),
              sopInstanceUid: commandText(store.getAffectedSopInstanceUid()),
            };
            const file: RetrievedFile = {
              path,
              sizeBytes: 0,
              contentType: 'application/dicom',
              sop,
            };
            files.push(file);
            const out: WriteStream = createWriteStream(`${path}.part`, { mode: 0o600 });
            open.add(out);
            out.once('close', () => open.delete(out));
            out.write(
              fileMetaInformation(
                sop.sopClassUid,
                sop.sopInstanceUid,
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

  private run(
    request: requests.Request,
    what: string,
    deadlineMs: number,
    hooks?: AssociationHooks,
  ) {
    const peer: AssociationPeer = { ...this.options, timeoutMs: this.timeoutMs };
    return runAssociation(peer, request, what, deadlineMs, hooks);
  }
}

/**
 * The image SOP Classes an AI study usually is (MR, enhanced MR, CT, enhanced CT, CR, DX, MG,
 * PET, secondary capture), proposed compressed when the PACS does not say which it holds.
 */
const COMMON_IMAGE_CLASSES = [
  '1.2.840.10008.5.1.4.1.1.4',
  '1.2.840.10008.5.1.4.1.1.4.1',
  '1.2.840.10008.5.1.4.1.1.2',
  '1.2.840.10008.5.1.4.1.1.2.1',
  '1.2.840.10008.5.1.4.1.1.1',
  '1.2.840.10008.5.1.4.1.1.1.1',
  '1.2.840.10008.5.1.4.1.1.1.2',
  '1.2.840.10008.5.1.4.1.1.128',
  '1.2.840.10008.5.1.4.1.1.7',
];

function text(value: unknown): string | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  return typeof v === 'string' && v.trim() !== '' ? v.trim() : undefined;
}

/** Accession Number / Patient ID (and its Issuer) whole: several values joined by `\\`, padding left to the check. */
/**
 * The Specific Character Set (0008,0005) of a C-FIND identifier holding `value`: dcmjs writes
 * every SH/LO/PN value as UTF-8, so a value beyond ASCII is declared `ISO_IR 192` (an
 * Identifier's text is in the character set it declares, PS3.4 Annex C). Without it the PACS
 * read the bytes in its default repertoire: `MÜNCHEN-4711` was `MÃ\u009cNCHEN-4711` to it and
 * the order's study was never found. An ASCII query declares nothing, as before (a PACS that
 * knows no ISO_IR 192 still answers it).
 */
function queryCharacterSet(value: string): { SpecificCharacterSet?: string } {
  // eslint-disable-next-line no-control-regex
  return /^[\u0000-\u007f]*$/.test(value) ? {} : { SpecificCharacterSet: 'ISO_IR 192' };
}

function identifierValue(value: unknown): string | undefined {
  const values = (Array.isArray(value) ? value : [value]).filter(
    (v): v is string => typeof v === 'string',
  );
  const joined = values.join('\\');
  return joined.trim() !== '' ? joined : undefined;
}

function integer(value: unknown): number | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  const n = typeof v === 'number' ? v : typeof v === 'string' && v.trim() !== '' ? Number(v) : NaN;
  return Number.isInteger(n) ? n : undefined;
}
