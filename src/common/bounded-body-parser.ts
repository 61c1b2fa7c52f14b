import { PayloadTooLargeException } from '@nestjs/common';
import type { NextFunction, Request, RequestHandler, Response } from 'express';

/** How much more than a body limit a body may bring and still be read (and dropped) before its 413. */
export const BODY_DRAIN_MAX_BYTES = 64 * 1024 * 1024;

/**
 * One of express's body parsers (express.json, express.urlencoded), bounded in what it reads
 * past its limit. Past the limit such a parser reads and drops the rest of the body before it
 * answers 413: a declared 10 GB body was read whole, an endless chunked one for ever, and the
 * parsers run before authentication. Here a declared length more than BODY_DRAIN_MAX_BYTES past
 * the limit is 413 at once, and a body without a Content-Length (chunked) is 413 once that much
 * has come; either way the connection is closed after the answer.
 */
export function boundedBodyParser(parser: RequestHandler, limitBytes: number): RequestHandler {
  const bound = limitBytes + BODY_DRAIN_MAX_BYTES;
  const tooLarge = (res: Response) => {
    res.setHeader('Connection', 'close');
    return new PayloadTooLargeException(`the request body is larger than ${limitBytes} bytes`);
  };
  return (req: Request, res: Response, next: NextFunction) => {
    if (Number(req.headers['content-length']) > bound) return next(tooLarge(res));
    let received = 0;
    let refused = false;
    const count = (chunk: Buffer) => {
      received += chunk.length;
      if (received <= bound || refused) return;
      refused = true;
      req.off('data', count);
      next(tooLarge(res));
    };
    if (req.headers['content-length'] === undefined) req.on('data', count);
    void parser(req, res, (error?: unknown) => {
      req.off('data', count);
      if (!refused) next(error);
    });
  };
}
