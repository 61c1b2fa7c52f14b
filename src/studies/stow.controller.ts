import { Controller, HttpCode, Inject, Param, Post, Req, Res } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import type { Response } from 'express';
import { Roles } from '../auth/auth.decorators';
import type { AuthenticatedRequest } from '../auth/bearer-auth.guard';
import { bodyStallReason, throwingOnStall } from '../common/body-stall';
import { sendProblem } from '../common/problem-body';
import { isDicomUid } from './dicom-uid';
import { StudyError, type StudyErrorCode } from './study.error';
import type { StowService } from './stow.service';
import { STOW_SERVICE } from './studies.tokens';

/** HTTP status per request-level STOW-RS failure (PS3.18 §10.5.3, Table 10.5.3-1). */
const STATUS: Record<StudyErrorCode, number> = {
  bad_multipart: 400,
  unsupported_media_type: 415,
  too_large: 413,
  invalid_study: 400,
  ambiguous_study: 409,
  pacs_unavailable: 503,
  pacs_error: 502,
};

/**
 * STOW-RS Store Instances (PS3.18 §10.5): `POST /dicomweb/studies` and
 * `POST /dicomweb/studies/{study}` with multipart/related; type="application/dicom".
 * The body is read here as a stream (the global JSON parser skips /dicomweb).
 */
@ApiExcludeController()
@Controller('dicomweb/studies')
export class StowController {
  constructor(@Inject(STOW_SERVICE) private readonly stow: StowService) {}

  @Post()
  @HttpCode(200)
  @Roles('sender')
  async storeInstances(@Req() req: AuthenticatedRequest, @Res() res: Response): Promise<void> {
    await this.handle(req, res, undefined);
  }

  @Post(':study')
  @HttpCode(200)
  @Roles('sender')
  async storeStudyInstances(
    @Param('study') study: string,
    @Req() req: AuthenticatedRequest,
    @Res() res: Response,
  ): Promise<void> {
    if (!isDicomUid(study)) {
      sendProblem(req, res, 400, 'bad_request', 'the path does not name a Study Instance UID');
      return;
    }
    await this.handle(req, res, study);
  }

  private async handle(
    req: AuthenticatedRequest,
    res: Response,
    targetStudyUid: string | undefined,
  ): Promise<void> {
    // The response is DICOM JSON only (no application/dicom+xml): PS3.18 §8.3.3.1 says 406.
    const accept = req.headers.accept;
    if (
      accept &&
      !/application\/dicom\+json|application\/json|application\/\*|\*\/\*/i.test(accept)
    ) {
      res.setHeader('Connection', 'close');
      sendProblem(
        req,
        res,
        406,
        'not_acceptable',
        'the response is only available as application/dicom+json',
      );
      return;
    }
    // RFC 9110 §8.4, §15.5.16: a content coding we do not decode is 415, naming what we take.
    // (Read as it is, a gzip body reported "no boundary found in the body".)
    const encoding = (req.headers['content-encoding'] ?? '').trim().toLowerCase();
    if (encoding !== '' && encoding !== 'identity') {
      res.setHeader('Connection', 'close');
      res.setHeader('Accept-Encoding', 'identity');
      sendProblem(
        req,
        res,
        415,
        'unsupported_media_type',
        `Content-Encoding ${encoding.slice(0, 40)} is not supported: send the body uncompressed`,
      );
      return;
    }
    const length = Number(req.headers['content-length']);
    try {
      const outcome = await this.stow.receive({
        // Not destroyed when reading stops early (size limit): the answer must still go out
        // on this socket, which closes after it (Connection: close).
        // A body cut short by its stall ends in BodyStallError, never as a complete one.
        body: throwingOnStall(req, req.iterator({ destroyOnReturn: false })),
        contentType: req.headers['content-type'],
        contentLength: Number.isFinite(length) ? length : undefined,
        targetStudyUid,
        sender: req.principal?.actor ?? null,
      });
      res
        .status(outcome.httpStatus)
        .type('application/dicom+json')
        .send(JSON.stringify(outcome.body));
    } catch (error) {
      // A stalled body (BodyStallError, or whatever the parser made of its cut end) is the
      // problem filter's 408.
      if (!(error instanceof StudyError) || bodyStallReason(req) !== undefined) throw error;
      // The rest of an unread body is not worth receiving: close the connection after answering.
      res.setHeader('Connection', 'close');
      sendProblem(req, res, STATUS[error.code], error.code, error.message);
    }
  }
}
