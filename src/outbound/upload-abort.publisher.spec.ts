import { ImagingClientError } from '../imaging-client/imaging-client.error';
import { UploadAbortPublisher, UPLOAD_ABORT_KIND } from './upload-abort.publisher';

const item = { id: '1', kind: UPLOAD_ABORT_KIND, attempts: 1 };
const payload = {
  upstreamOrderId: '0b6b1c9e-7f1e-4a57-9d43-5a3e2f1c0d11',
  uploadId: '5f0e6c1a-2b3d-4e5f-8a9b-0c1d2e3f4a5b',
};

function failingWith(error: unknown) {
  return new UploadAbortPublisher(() => Promise.reject(error));
}

function answered(status: number, code: string, details = {}) {
  return new ImagingClientError(
    code as ConstructorParameters<typeof ImagingClientError>[0],
    'multipart-abort',
    `status ${status}`,
    { status, upstreamError: { error: 'upload_not_open', message: 'MUSTERMANN' }, ...details },
  );
}

describe('UploadAbortPublisher', () => {
  it('an abort taken is delivered, with the upstream ids as asked', async () => {
    const calls: unknown[] = [];
    const p = new UploadAbortPublisher((uploadId, orderId) => {
      calls.push([uploadId, orderId]);
      return Promise.resolve({ aborted: true });
    });
    await expect(p.deliverPayload(item, payload)).resolves.toMatchObject({
      outcome: 'delivered',
    });
    expect(calls).toEqual([[payload.uploadId, payload.upstreamOrderId]]);
  });

  it.each([
    [404, 'not_found'],
    [409, 'conflict'],
  ])('%i (%s): the upload is no longer open upstream, nothing to abort: done', async (s, code) => {
    const r = await failingWith(answered(s, code)).deliverPayload(item, payload);
    expect(r.outcome).toBe('delivered');
    expect(r.answer).toMatch(/^already gone upstream/);
  });

  it.each([
    [503, 'server_error_exhausted'],
    [429, 'rate_limited_exhausted'],
    [410, 'retired'],
    [401, 'unauthorized'],
  ])('%i (%s): tried again later, with the upstream’s Retry-After', async (s, code) => {
    const r = await failingWith(answered(s, code, { retryAfterMs: 30_000 })).deliverPayload(
      item,
      payload,
    );
    expect(r).toMatchObject({ outcome: 'retry', retryAfterMs: 30_000 });
  });

  it('a network failure or timeout is tried again', async () => {
    for (const code of ['network', 'deadline'] as const) {
      const r = await failingWith(
        new ImagingClientError(code, 'multipart-abort', 'socket hang up'),
      ).deliverPayload(item, payload);
      expect(r.outcome).toBe('retry');
    }
    expect((await failingWith(new Error('boom')).deliverPayload(item, payload)).outcome).toBe(
      'retry',
    );
  });

  it('400 / 403: the request itself is refused: a dead letter at once, no upstream message quoted', async () => {
    for (const [s, code] of [
      [400, 'bad_request'],
      [403, 'forbidden'],
    ] as const) {
      const r = await failingWith(answered(s, code)).deliverPayload(item, payload);
      expect(r.outcome).toBe('dead');
      expect(r.answer).toBe(`refused: ${code} (HTTP ${s}): upload_not_open`);
      expect(JSON.stringify(r)).not.toContain('MUSTERMANN');
    }
  });

  it('a row that is not an upload abort is a dead letter, never a call', async () => {
    let called = false;
    const p = new UploadAbortPublisher(() => {
      called = true;
      return Promise.resolve();
    });
    expect((await p.deliverPayload({ ...item, kind: 'fhir-task' }, payload)).outcome).toBe('dead');
    expect((await p.deliverPayload(item, { uploadId: payload.uploadId })).outcome).toBe('dead');
    expect(called).toBe(false);
  });
});
