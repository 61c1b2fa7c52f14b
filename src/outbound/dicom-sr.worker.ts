import { parentPort } from 'node:worker_threads';
import type { PublicationInput } from '../mappings/publication.model';
import { buildMeasurementSr, type SourceStudy } from './dicom-result.builder';
import { dicomTagDump } from './dicom-tag-dump';
import { OutboundError, type OutboundErrorCode } from './outbound.error';

/**
 * Worker thread entry (./dicom-sr.offload.ts): builds one measurement SR and its tag dump.
 * dcmjs writes and reads a report of 300 findings (a 650 KB SR) in 0.4–1.7 s and 0.3–0.4 s of
 * CPU; on the main thread that held `/health`, the MLLP intake and every other delivery.
 */
export interface SrBuildRequest {
  id: number;
  input: PublicationInput;
  source: SourceStudy;
  now: string;
}

export type SrBuildAnswer =
  | { id: number; part10: Uint8Array; sent: ReturnType<typeof dicomTagDump>; cuts: string[] }
  | {
      id: number;
      error: string;
      /** An OutboundError's code and detail: a final refusal, not a failure to retry. */
      outbound?: { code: OutboundErrorCode; detail: Record<string, unknown> };
    };

parentPort?.on('message', (request: SrBuildRequest) => {
  try {
    const cuts: string[] = [];
    const part10 = buildMeasurementSr(request.input, request.source, new Date(request.now), cuts);
    const sent = dicomTagDump(part10);
    const bytes = new Uint8Array(part10.buffer, part10.byteOffset, part10.byteLength);
    parentPort!.postMessage({ id: request.id, part10: bytes, sent, cuts } satisfies SrBuildAnswer, [
      bytes.buffer as ArrayBuffer,
    ]);
  } catch (error) {
    parentPort!.postMessage({
      id: request.id,
      error: (error as Error).message,
      ...(error instanceof OutboundError
        ? { outbound: { code: error.code, detail: error.detail } }
        : {}),
    } satisfies SrBuildAnswer);
  }
});
