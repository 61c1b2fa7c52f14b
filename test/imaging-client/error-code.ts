import { ImagingClientError } from '../../src/imaging-client/imaging-client.error';

/** How a client call ended: `resolved`, the ImagingClientError's code, or `other: …`. */
export async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return 'resolved';
  } catch (error) {
    return error instanceof ImagingClientError ? error.code : `other: ${String(error)}`;
  }
}
