import { ImagingClientError } from './imaging-client.error';
import type { PartUrls, PresignedUrl } from './imaging-client.types';
import type { UploadedPart } from './ports';
import { printable } from './listed-orders';
import { partNumbers } from './upload-plan';
import { byOrder, callJson } from './upstream-calls';
import type { UpstreamHttp } from './upstream-http';
import { sameUpstreamOrderId } from './upstream-schemas';
import { upstreamInstant } from './upstream-time';

/**
 * The upload endpoints, `client.uploads`: a presigned URL for a single PUT, or the multipart
 * protocol (initiate, part URLs, complete, abort). The StudyUploader drives them; the PUTs to
 * object storage themselves are its own.
 */
export class UploadEndpoints {
  constructor(private readonly http: UpstreamHttp) {}

  /** `GET /upload/single-put`: one presigned write-only URL, for studies under 5 MB. */
  async getSinglePutUrl(orderId: string): Promise<PresignedUrl> {
    const parsed = await callJson(this.http, 'single-put-url', byOrder(orderId));
    return { url: parsed.url, expiresAt: parseTime(parsed.expires_at) };
  }

  /** `POST /upload/multipart/initiate`. */
  async initiateMultipart(orderId: string, sizeBytes: number): Promise<{ uploadId: string }> {
    const parsed = await callJson(this.http, 'multipart-initiate', {
      json: { order_id: orderId, size_bytes: sizeBytes },
      orderId,
    });
    // An upload of another order (an upstream cache or routing mix-up): our patient's study
    // would go into that order and be completed there. No answer about this order's upload.
    if (parsed.order_id !== undefined && !sameUpstreamOrderId(parsed.order_id, orderId)) {
      throw new ImagingClientError(
        'invalid_response',
        'multipart-initiate',
        `the answer is about another order (order_id ${printable(parsed.order_id)}), not the one asked for`,
        { status: 201 },
      );
    }
    return { uploadId: parsed.upload_id };
  }

  /**
   * `POST /upload/multipart/presigned-urls`: URLs for parts 1..count, or fresh ones for the
   * given part numbers (resume, expiry).
   */
  async getPartUrls(
    uploadId: string,
    parts: { count: number } | { partNumbers: number[] },
    orderId?: string,
  ): Promise<PartUrls> {
    const wanted = 'count' in parts ? partNumbers(parts.count) : parts.partNumbers;
    const json =
      'count' in parts
        ? { upload_id: uploadId, parts: parts.count }
        : { upload_id: uploadId, part_numbers: parts.partNumbers };
    const parsed = await callJson(this.http, 'multipart-presigned-urls', { json, orderId });
    // URLs of another upload would put our parts into it: no answer about this upload.
    if (parsed.upload_id !== undefined && parsed.upload_id !== uploadId) {
      throw new ImagingClientError(
        'invalid_response',
        'multipart-presigned-urls',
        `the answer is about another upload (upload_id ${printable(parsed.upload_id)}), not the one asked for`,
      );
    }
    const urls = new Map(parsed.urls.map((u) => [u.part_number, u.url]));
    const missing = wanted.filter((n) => !urls.has(n));
    if (missing.length) {
      throw new ImagingClientError(
        'invalid_response',
        'multipart-presigned-urls',
        `no URL for part(s) ${missing.slice(0, 10).join(', ')}`,
      );
    }
    return { urls, expiresAt: parseTime(parsed.expires_at) };
  }

  /** `POST /upload/multipart/complete`: starts processing. */
  async completeMultipart(uploadId: string, parts: UploadedPart[], orderId?: string) {
    const sorted = [...parts].sort((a, b) => a.partNumber - b.partNumber);
    const json = {
      upload_id: uploadId,
      parts: sorted.map((p) => ({ part_number: p.partNumber, etag: p.etag })),
    };
    return callJson(this.http, 'multipart-complete', {
      json,
      orderId,
    });
  }

  /** `POST /upload/multipart/abort`. */
  async abortMultipart(uploadId: string, orderId?: string) {
    return callJson(this.http, 'multipart-abort', {
      json: { upload_id: uploadId },
      orderId,
    });
  }
}

/**
 * `expires_at`, when it names its zone (upstream-time.ts); without one it is no instant (read
 * as local time on a server east of UTC, URLs valid for an hour looked expired on arrival and
 * were fetched again before every part), and the contract's hour from issue applies.
 */
function parseTime(value: string | undefined): number | undefined {
  return upstreamInstant(value);
}
