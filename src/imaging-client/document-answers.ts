import { QC_ROUND_HEADER, QC_ROUNDS, type QcRound } from '../imaging-spec/imaging-spec';
import { firstDuplicateKey } from '../common/json-duplicate-keys';
import { jsonDepth } from '../common/json-scan';
import { ImagingClientError } from './imaging-client.error';
import type { UpstreamDocument } from './imaging-client.types';
import { headerValue } from './upstream-answers';
import type { UpstreamResponse } from './upstream-http.types';

/**
 * The answers not read with a schema (upstream-schemas.ts): a report document, whatever its
 * content type, and a QC report, JSON of any shape with its round in a header.
 */

/** A report document (`/results`, `/failure-report`, `/report`): any bytes, but not none. */
export function readDocument(operation: string, r: UpstreamResponse): UpstreamDocument {
  if (r.body.length === 0) {
    throw new ImagingClientError('invalid_response', operation, 'empty document', {
      status: r.status,
    });
  }
  return {
    contentType: headerValue(r.headers, 'content-type') ?? 'application/octet-stream',
    body: r.body,
  };
}

/**
 * A QC report (findings, checks, acquisition details) nests a few levels; one nested deeper is
 * no report of findings, and it is written out again as JSON (stored, then published to the
 * EHR and the RIS), which overflows the stack at a few thousand levels.
 */
export const MAX_QC_REPORT_DEPTH = 64;

/** `/qc-report`: JSON findings, with the round actually returned (header `X-QC-Round`). */
export function readQcReport(r: UpstreamResponse): { round: QcRound; report: unknown } {
  const header = headerValue(r.headers, QC_ROUND_HEADER)?.trim().toLowerCase();
  if (!header || !(QC_ROUNDS as readonly string[]).includes(header)) {
    throw new ImagingClientError(
      'invalid_response',
      'qc-report',
      `missing or unknown ${QC_ROUND_HEADER} header`,
      { status: r.status },
    );
  }
  let report: unknown;
  const text = r.body.toString('utf8');
  try {
    report = JSON.parse(text);
  } catch {
    throw new ImagingClientError('invalid_response', 'qc-report', 'QC report is not JSON', {
      status: r.status,
    });
  }
  if (jsonDepth(text) > MAX_QC_REPORT_DEPTH) {
    throw new ImagingClientError(
      'invalid_response',
      'qc-report',
      `QC report nested deeper than ${MAX_QC_REPORT_DEPTH} levels`,
      { status: r.status },
    );
  }
  // Stored as JSON written again from the parse (fetch-documents), which keeps only the last of
  // two equal keys: a verdict or order_id named twice would be decided here, silently.
  const duplicate = firstDuplicateKey(text);
  if (duplicate !== undefined) {
    throw new ImagingClientError(
      'invalid_response',
      'qc-report',
      `the QC report names ${duplicate} twice in one object`,
      { status: r.status },
    );
  }
  return { round: header as QcRound, report };
}
