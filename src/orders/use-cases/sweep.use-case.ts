import { writeAuditEvents } from '../../persistence/audit-event.repository';
import { clinicalEndReason } from '../../mappings/local-end-reasons';
import {
  STATUS_TABLE,
  type StatusRow,
  type StatusRowKey,
} from '../../mappings/status-mapping.table';
import { ORDER_JOBS } from '../intake.model';
import { LIFECYCLE_JOBS } from '../lifecycle-jobs';
import { orderAlerts } from '../order-metrics';
import { loadOrder, snapshot } from '../order-transitions';
import type { EndLocallyUseCase } from './end-locally.use-case';
import type { LifecycleDeps } from './lifecycle-deps';
import { alertEvent } from '../alert-event';

/** What one sweep did, per kind of finding. */
export interface SweepSummary {
  documentsNotFetched: number;
  studyDeadlines: number;
  stuck: number;
  notPlaced: number;
  /** Orders whose upload job used every attempt: failed (not-uploaded). */
  notUploaded: number;
  /** Orders whose cancel job used every attempt: ended cancelled here (upstream-cancel-unconfirmed). */
  cancelNotConfirmed: number;
  /** Orders cancelled here with upstream-cancel-unconfirmed no longer followed (upstream-cancel-unfollowed). */
  cancelUnfollowed: number;
  /** Orders waiting for a job of theirs that was lost (place, acquire, upload): enqueued again. */
  jobsRequeued: number;
  leasesResumed: number;
}

/**
 * How old an order waiting for a job of its own (place, acquire, upload) without any must be
 * before the sweep enqueues that job again: every step enqueues the next on the transaction
 * that moves the order (through the job outbox, within seconds), so an order this old without
 * one lost it.
 */
export const LOST_JOB_AFTER_MS = 10 * 60_000;

/** The minute tick's deadlines and leases. */
export class SweepUseCase {
  constructor(
    private readonly deps: LifecycleDeps,
    private readonly ending: EndLocallyUseCase,
  ) {}

  /** Study deadline, stuck upstream orders, exhausted place / cancel / upload jobs, lapsed upload leases. */
  async sweep(): Promise<SweepSummary> {
    const { jobs, settings } = this.deps;
    const late = await this.deps.orders.pastStudyDeadline();
    for (const o of late) await this.ending.studyDeadlinePassed(o.id);
    const stuck = await this.deps.orders.stuckUpstream(settings.upstreamStuckMs);
    for (const o of stuck) {
      await this.ending.endLocally(
        o.id,
        'failed',
        `the upstream order stayed ${o.upstream_status} longer than ${Math.round(settings.upstreamStuckMs / 3_600_000)} h`,
        'upstream-stuck',
      );
    }
    // A place job that used every attempt (graphile-worker's back-off: about four days of an
    // upstream that did not take the create) never runs again: the order would sit in
    // `received` for good, no one told. It ends here, the clinician getting a no-result answer.
    const unplaced = await this.deps.orders.placeJobsExhausted();
    for (const o of unplaced) {
      await this.ending.endLocally(
        o.id,
        'failed',
        `not placed upstream: the create failed on ${this.triedFor(o, o.place_attempted_at)}`,
        'not-placed',
      );
    }
    // A cancel job that used every attempt (the upstream refused or was unreachable for the
    // whole retry budget) never runs again: the order, its cancel accepted (the RIS got CR, the
    // ServiceRequest revoked), stayed `processing` with its Task in progress until the upstream
    // ended it or the stuck sweep failed it days later. It ends cancelled here, as asked, and
    // the analyst is told the upstream order may still run; a result it delivers later is
    // kept, not published (result-after-cancel).
    const uncancelled = await this.deps.orders.cancelJobsExhausted();
    for (const o of uncancelled) {
      await this.ending.endLocally(
        o.id,
        'cancelled',
        `cancelled here as the orderer asked, but the upstream cancel failed on ${this.triedFor(o, o.cancel_requested_at)}: the upstream may still process the order`,
        'upstream-cancel-unconfirmed',
        { upstreamAnswered: true },
      );
    }
    // An order cancelled here whose cancel the upstream never took (upstream-cancel-unconfirmed)
    // is followed so that a result it delivers is kept and an end it reaches clears the alert.
    // Before, it was followed for good (the stuck sweep takes only live orders): an upstream
    // that never moves again was asked about it every cycle, forever. With no change upstream
    // or here for UPSTREAM_STUCK_HOURS, the bound of a live order, it is no longer followed.
    const unfollowed = await this.deps.orders.unconfirmedCancelsStale(settings.upstreamStuckMs);
    for (const o of unfollowed) await this.stopFollowing(o);
    // An order waiting for a job of its own that is gone (deleted, lost in a queue reset or a
    // restore) was never looked at again: `received` (the exhausted-job check above needs a
    // job row), `placed` or `study-ready` (the study deadline failed it a day later, "no
    // usable study arrived", even with its study packaged). Its job is enqueued again under
    // its key; a create an earlier run made is found by its correlation id (place use case),
    // so no second upstream order; acquiring and uploading are idempotent (the upload lease).
    let requeued = 0;
    const orphans = await this.deps.orders.waitingWithoutJob(LOST_JOB_AFTER_MS);
    for (const o of orphans) if (await this.requeue(o)) requeued += 1;
    // A delivered order whose results job is gone the same way: its result never came.
    const unfetchedResults = await this.deps.orders.deliveredWithoutDocumentsJob(LOST_JOB_AFTER_MS);
    for (const o of unfetchedResults) {
      if (await this.requeue({ ...o, state: 'delivered', place_attempted_at: null })) requeued += 1;
    }
    // The reports of a status that were never fetched (every attempt of the documents job
    // failed): the order has its state, but what waits for the reports (the result ORU,
    // DiagnosticReport, SR) never goes. An operator is told, once.
    const unfetched = await this.deps.orders.documentJobsExhausted();
    for (const o of unfetched) {
      await this.documentsNotFetched(o);
    }
    // An upload job that used every attempt (the upstream refused or dropped the study for
    // the whole retry budget: 5xx, network, 429) never runs again. Before, the lapsed-lease
    // check below enqueued it again, its back-off starting over: the study was retried
    // forever and no one was told. It ends here like a create that was never taken: failed,
    // alert not-uploaded, the clinician getting a no-result answer, the upstream order
    // (waiting for a study that will not come) cancelled, a multipart upload aborted (both
    // by endLocally).
    const unuploaded = await this.deps.orders.uploadJobsExhausted();
    for (const o of unuploaded) {
      await this.ending.endLocally(
        o.id,
        'failed',
        `not uploaded: the upload of the study failed on ${this.triedFor(o, o.upload_started_at)}`,
        'not-uploaded',
      );
    }
    let resumed = 0;
    const lapsed = await this.deps.uploadLease.lapsed();
    for (const o of lapsed) if (await this.resumeUpload(o.id)) resumed += 1;
    if (resumed > 0) jobs.kick();
    return {
      documentsNotFetched: unfetched.length,
      studyDeadlines: late.length,
      stuck: stuck.length,
      notPlaced: unplaced.length,
      cancelNotConfirmed: uncancelled.length,
      cancelUnfollowed: unfollowed.length,
      notUploaded: unuploaded.length,
      jobsRequeued: requeued,
      leasesResumed: resumed,
    };
  }

  /** Stops following an unconfirmed cancel: alert upstream-cancel-unfollowed replaces it. */
  private async stopFollowing(o: { id: string; upstream_status: string | null }): Promise<void> {
    const alert = 'upstream-cancel-unfollowed';
    const hours = Math.round(this.deps.settings.upstreamStuckMs / 3_600_000);
    const reason = `no longer followed: the upstream never confirmed the cancel, and the upstream order (last seen ${o.upstream_status ?? 'unknown'}) has not changed for ${hours} h (UPSTREAM_STUCK_HOURS); whether it still runs is unknown, and a result it delivers later is not fetched`;
    const raised = await this.deps.dataSource.transaction(async (manager) => {
      const order = await loadOrder(manager, o.id, true);
      if (!order) return false;
      const replaced = await this.deps.orders.replaceAlert(
        o.id,
        'upstream-cancel-unconfirmed',
        alert,
        reason,
        manager,
      );
      if (!replaced) return false;
      await writeAuditEvents(manager, [
        alertEvent(o.id, alert, reason, {
          replaces: 'upstream-cancel-unconfirmed',
          upstreamStatus: o.upstream_status,
          afterHours: hours,
        }),
      ]);
      await this.deps.events.alertRaised(manager, { order: snapshot(order), alert, reason });
      return true;
    });
    if (raised) {
      orderAlerts.inc({ alert });
      this.deps.logger.error({ orderId: o.id, alert }, 'unconfirmed cancel no longer followed');
    }
  }

  /**
   * `all N attempts over H h (last: …)` for a job that used every attempt: H counted from `since`
   * (at least 1; the part left out when `since` is unknown), its last error cut (lastError).
   */
  private triedFor(o: { attempts: number; last_error: string | null }, since: Date | null): string {
    const over =
      since === null
        ? ''
        : ` over ${Math.max(1, Math.round((this.deps.clock.now() - new Date(since).getTime()) / 3_600_000))} h`;
    return `all ${o.attempts} attempts${over} (last: ${lastError(o.last_error)})`;
  }

  /**
   * Enqueues an order's lost job again; false when, looked at again under the order's row lock,
   * it is no longer lost. Two sweeps at once (the minute tick and POST /api/orders/poll-cycle,
   * or a tick overrunning the next) both read "no job" before either enqueued one: both
   * enqueued it, and once a worker had taken the first, the second became a second job under
   * the key (graphile-worker clears a running job's key), the step run twice. The second sweep
   * now waits for the first's transaction and then sees its job.
   */
  private async requeue(o: {
    id: string;
    state: string;
    place_attempted_at: Date | null;
  }): Promise<boolean> {
    const orderId = o.id;
    const [task, key, payload]: [string, string, Record<string, string>] =
      o.state === 'received'
        ? [ORDER_JOBS.place, `place:${orderId}`, { orderId }]
        : o.state === 'placed'
          ? [LIFECYCLE_JOBS.acquire, `acquire:${orderId}`, { orderId }]
          : o.state === 'study-ready'
            ? [LIFECYCLE_JOBS.upload, `upload:${orderId}`, { orderId }]
            : [
                LIFECYCLE_JOBS.fetchDocuments,
                `documents:${orderId}:DELIVERED`,
                { orderId, upstreamStatus: 'DELIVERED', rowKey: 'DELIVERED' },
              ];
    // The keys waitingWithoutJob / deliveredWithoutDocumentsJob looked for.
    const looked =
      o.state === 'placed' || o.state === 'study-ready'
        ? [`acquire:${orderId}`, `upload:${orderId}`]
        : [key];
    const attempted = o.state === 'received' && o.place_attempted_at !== null;
    const enqueued = await this.deps.dataSource.transaction(async (manager) => {
      const order = await loadOrder(manager, orderId, true);
      if (!order) return false;
      if (o.state !== 'delivered' && order.state !== o.state) return false;
      if (await this.deps.orders.hasJobUnder(looked, manager)) return false;
      await writeAuditEvents(manager, [
        {
          kind: 'error',
          orderId,
          severity: 'warning',
          actor: 'adapter',
          summary: `the order's ${task} job was missing (${o.state === 'delivered' ? 'its results never fetched' : `still ${o.state}`}, no job to move it on${attempted ? '; a create was tried before' : ''}): enqueued again`,
          detail: { job: task, jobKey: key, state: o.state, attempted },
        },
      ]);
      await this.deps.jobs.enqueue(task, payload, { manager, jobKey: key });
      return true;
    });
    if (!enqueued) return false;
    this.deps.jobs.kick();
    this.deps.logger.warn({ orderId, job: task }, 'order job missing; enqueued again');
    return true;
  }

  /**
   * Enqueues the upload of a lapsed lease again; false when, looked at again under the order's
   * row lock, it is no longer lapsed. A new job even if a dead worker's job still holds the key
   * (graphile-worker then creates a new job and clears the old one's key). Two sweeps at once
   * both read the lease lapsed before either enqueued: both enqueued it, and once a worker had
   * taken the first, the second became a second job under the key, the upload run twice. The
   * job goes through the job outbox on the locked transaction, so the second sweep, waiting for
   * the lock, then sees it (lapsed counts a job in the outbox).
   */
  private async resumeUpload(orderId: string): Promise<boolean> {
    return this.deps.dataSource.transaction(async (manager) => {
      if (!(await loadOrder(manager, orderId, true))) return false;
      if (!(await this.deps.uploadLease.isLapsed(orderId, manager))) return false;
      await this.deps.jobs.enqueue(
        LIFECYCLE_JOBS.upload,
        { orderId },
        { manager, jobKey: `upload:${orderId}` },
      );
      return true;
    });
  }

  private async documentsNotFetched(o: {
    id: string;
    row_key: string;
    attempts: number;
    last_error: string | null;
  }): Promise<void> {
    const alert = 'documents-not-fetched';
    const row: StatusRow | undefined =
      o.row_key in STATUS_TABLE ? STATUS_TABLE[o.row_key as StatusRowKey] : undefined;
    const noResultEnd = row?.terminal === true && row.report === 'cancelled';
    const outcome =
      o.row_key === 'DELIVERED'
        ? 'no result is published, and the clinic is told none is coming'
        : noResultEnd
          ? 'the no-result end is published without them'
          : 'what waits for them is not published';
    const reason = `the upstream's reports for ${o.row_key} were not fetched: all ${o.attempts} attempts failed (last: ${lastError(o.last_error)}); ${outcome}`;
    const raised = await this.deps.dataSource.transaction(async (manager) => {
      const order = await loadOrder(manager, o.id, true);
      if (!order) return false;
      if (!(await this.deps.orders.raiseAlert(o.id, alert, reason, manager))) return false;
      if (o.row_key === 'DELIVERED') {
        // No result is coming: the clinic is told so (the row of an order that could not be
        // processed), not left with the Task `completed` of DELIVERED naming a report that
        // never comes. The clinic reads the sentence of CLINICAL_END_REASONS; the attempts and
        // the upstream's error stay with the analyst (alert webhook, timeline, last_error).
        await this.deps.events.endedLocally(manager, {
          order: snapshot(order),
          state: 'failed',
          reason: clinicalEndReason('failed', alert),
          alert,
          alertReason: reason,
        });
      } else if (noResultEnd) {
        // A no-result end (failure, final QC rejection) goes out without its report, as when
        // none could be kept: the clinic hears that no result is coming.
        await this.deps.events.alertRaised(manager, { order: snapshot(order), alert, reason });
        await this.deps.events.documentsStored(manager, {
          order: snapshot(order),
          upstreamStatus: o.row_key.startsWith('QC_FAILED') ? 'QC_FAILED' : o.row_key,
          documents: [],
          ...(row ? { rowKey: o.row_key as StatusRowKey } : {}),
        });
      } else {
        await this.deps.events.alertRaised(manager, { order: snapshot(order), alert, reason });
      }
      await writeAuditEvents(manager, [
        alertEvent(o.id, alert, reason, { mappingRow: o.row_key, attempts: o.attempts }),
      ]);
      return true;
    });
    if (raised) {
      orderAlerts.inc({ alert });
      this.deps.logger.error({ orderId: o.id, alert }, 'order documents not fetched');
    }
  }
}

/** A job's last error as the sweep's reasons quote it: its first 300 characters, `unknown` when none. */
function lastError(text: string | null): string {
  return (text ?? 'unknown').slice(0, 300);
}
