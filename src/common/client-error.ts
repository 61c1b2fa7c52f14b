import { maxHeaderSize, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { PROBLEM_JSON, problemBody } from './problem-body';

/**
 * What the HTTP server answers a request its parser refuses before any route sees it. A request
 * line and headers over the server's limit (Node's 16 KiB) are 431 in words: an audit search
 * takes an identifier of 4,096 characters, and percent-encoded 4,096 `Ä` are 24 KiB. Node's own
 * answer was a bare 431 with no body (a blank page; an API client told nothing). Under /fhir an
 * OperationOutcome, elsewhere problem JSON, as each front door answers. Every other parser
 * refusal is answered as Node does (its default stops once a listener is added).
 */
export function answerClientErrors(server: Server): void {
  server.on('clientError', (error: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket) => {
    const s = socket as Socket & { _httpMessage?: { headersSent?: boolean } | null };
    // As Node's own handler: answer unless a response on this connection has begun (a kept-alive
    // connection has written earlier answers: its next request still gets one).
    if (s.writable && !s._httpMessage?.headersSent) {
      if (error.code === 'HPE_HEADER_OVERFLOW') {
        s.write(headerOverflowAnswer(server, error.rawPacket));
      } else {
        s.write(NODE_ANSWERS[error.code ?? ''] ?? NODE_ANSWERS.default);
      }
    }
    s.destroy(error);
  });
}

/** Node's own answers (lib/_http_server.js), for the refusals other than the header limit. */
const NODE_ANSWERS: Record<string, string> = {
  HPE_CHUNK_EXTENSIONS_OVERFLOW: 'HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\n\r\n',
  ERR_HTTP_REQUEST_TIMEOUT: 'HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n',
  default: 'HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n',
};

function headerOverflowAnswer(server: Server, received: Buffer | undefined): string {
  // a server created with its own maxHeaderSize keeps it on itself (not in Node's types)
  const limit = (server as Server & { maxHeaderSize?: number }).maxHeaderSize ?? maxHeaderSize;
  // The request line as far as it came: only its method and path's start are looked at.
  const line = (received ?? Buffer.alloc(0)).subarray(0, 256).toString('latin1');
  const path = /^[A-Z]+ (\/[^\s?]*)/.exec(line)?.[1] ?? '/';
  const detail = `the request line and headers are longer than ${limit} bytes, the most this server reads; a long search value counts as sent, percent-encoded (a non-ASCII character is 6 to 12 bytes): search by a shorter value`;
  const fhir = /^\/fhir(\/|$)/i.test(path);
  const body = JSON.stringify(
    fhir
      ? {
          resourceType: 'OperationOutcome',
          issue: [{ severity: 'error', code: 'too-long', diagnostics: detail }],
        }
      : problemBody(
          { originalUrl: path.slice(0, 200) },
          431,
          'request_header_fields_too_large',
          detail,
        ),
  );
  return [
    'HTTP/1.1 431 Request Header Fields Too Large',
    `Content-Type: ${fhir ? 'application/fhir+json; charset=utf-8' : PROBLEM_JSON}`,
    `Content-Length: ${Buffer.byteLength(body)}`,
    'Cache-Control: no-store',
    'X-Content-Type-Options: nosniff',
    'Connection: close',
    '',
    body,
  ].join('\r\n');
}
