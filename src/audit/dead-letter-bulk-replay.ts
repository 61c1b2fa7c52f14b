import { AppError } from '../common/app-error';
import type {
  AuditQueryService,
  DeadLetterCandidate,
  DeadLetterFilter,
} from './audit-query.service';

/** The most dead letters one bulk replay queues (each its own replay, audited). */
export const BULK_REPLAY_MAX = 100;

/** A bulk replay as asked: which dead letters, how many at most, why, and whether only to count. */
export interface BulkReplayRequest extends DeadLetterFilter {
  reason: string;
  limit?: number;
  dryRun?: boolean;
}

/** What happened to one dead letter of a bulk replay. */
export type BulkReplayLetter = DeadLetterCandidate & {
  /** `would-replay` (dry run), `queued`, or `refused` (with why: not dead any more, destination not configured). */
  outcome: 'would-replay' | 'queued' | 'refused';
  note?: string;
};

export interface BulkReplayResult {
  dryRun: boolean;
  /** How many dead letters match the filter now (before this replay). */
  matched: number;
  /** The letters taken (at most `limit`, longest dead first) and what came of each. */
  letters: BulkReplayLetter[];
  /** How many matching letters this request did not queue: send it again for the next ones. */
  remaining: number;
}

/**
 * Replays the dead letters an analyst names by destination, reason and time given up, at
 * most BULK_REPLAY_MAX a request, longest dead first. Each letter goes through the single
 * replay (AuditQueryService.replayDeadLetter): its own transaction, locked, still dead, its
 * destination configured, one `outbound.replay` event with who and why (and this filter). The
 * outbox workers then apply the same rules as to any replay: a letter superseded by a later
 * delivered correction is not sent, one behind a correction in flight waits for it.
 */
export class DeadLetterBulkReplay {
  constructor(private readonly query: AuditQueryService) {}

  async replay(request: BulkReplayRequest, actor: string): Promise<BulkReplayResult> {
    // A destination this configuration does not deliver to: 409, as for one letter.
    if (request.destination) this.query.refuseUndeliverable(request.destination);
    const filter: DeadLetterFilter = {
      ...(request.destination ? { destination: request.destination } : {}),
      ...(request.error ? { error: request.error } : {}),
      ...(request.from ? { from: request.from } : {}),
      ...(request.to ? { to: request.to } : {}),
    };
    const limit = Math.min(request.limit ?? BULK_REPLAY_MAX, BULK_REPLAY_MAX);
    const { matched, letters } = await this.query.deadLettersMatching(filter, limit);
    const recorded = {
      ...filter,
      ...(filter.from ? { from: filter.from.toISOString() } : {}),
      ...(filter.to ? { to: filter.to.toISOString() } : {}),
      matched,
    };
    const out: BulkReplayLetter[] = [];
    for (const letter of letters) {
      if (request.dryRun) {
        out.push({ ...letter, ...this.dryRunOutcome(letter) });
        continue;
      }
      try {
        await this.query.replayDeadLetter(letter.id, actor, request.reason, recorded);
        out.push({ ...letter, outcome: 'queued' });
      } catch (error) {
        // replayed or deleted by someone else meanwhile, or its destination not configured
        if (!(error instanceof AppError) || !['conflict', 'not_found'].includes(error.code)) {
          throw error;
        }
        out.push({ ...letter, outcome: 'refused', note: error.message });
      }
    }
    const queued = out.filter((l) => l.outcome === 'queued').length;
    return { dryRun: Boolean(request.dryRun), matched, letters: out, remaining: matched - queued };
  }

  private dryRunOutcome(letter: DeadLetterCandidate): Pick<BulkReplayLetter, 'outcome' | 'note'> {
    try {
      this.query.refuseUndeliverable(letter.destination);
      return { outcome: 'would-replay' };
    } catch (error) {
      return { outcome: 'refused', note: (error as Error).message };
    }
  }
}
