import { mergedIdentifiers, primaryIdentifier, retiredOf } from '../../domain/patient-identity';
import type { EntityManager } from 'typeorm';
import { writeAuditEvents, type AuditEventInput } from '../../persistence/audit-event.repository';
import type { OrderRequest, PatientInfo } from '../../domain/order-request';
import type { JobQueue } from '../../jobs/job-queue';
import type { OrderRepository } from '../../persistence/order.repository';
import { ORDER_JOBS, primaryPatientId, stripUndefined, type IntakeInput } from '../intake.model';
import { mappingEvent } from './intake-audit';
import type { IntakePlan } from './intake-decision';
import { REPLACE_WORDING, type ReplaceStep } from './replace-decision';

/** The intake's changes to orders already stored: cancel, change, demographics, merge. */
export class OrderChanges {
  constructor(
    private readonly jobs: JobQueue,
    private readonly orders: OrderRepository,
  ) {}

  /** The less frequent changes (cancel, change, demographics, merge), after the message row exists. */
  async applyChanges(
    manager: EntityManager,
    input: IntakeInput,
    messageId: string,
    plan: IntakePlan,
  ): Promise<void> {
    const actor = input.actor ?? input.sender;
    const audit: AuditEventInput[] = [];
    for (const step of plan.steps) {
      if (step.kind === 'cancel') {
        await this.orders.requestCancelOnce(
          step.orderId,
          `${input.messageType ?? input.transport} from ${input.sender ?? 'unknown'}`,
          manager,
        );
        audit.push({
          kind: 'order.cancel-requested',
          orderId: step.orderId,
          inboundMessageId: messageId,
          actor,
          summary: `cancel requested by ${actor ?? 'the orderer'}`,
          detail: { sourceRef: step.order.sourceRef, stateAtRequest: step.state },
        });
        await this.jobs.enqueue(
          ORDER_JOBS.cancel,
          { orderId: step.orderId },
          { manager, jobKey: `cancel:${step.orderId}` },
        );
      } else if (step.kind === 'update') {
        // The order's numbers are its keys (v2.5.1 §4.5.1.2: the placer order number is the
        // order's permanent identifier; orders.placer_order_number indexes it): an XO found by
        // its filler number that names another ORC-2 changes the order, never its numbers.
        // Before, the request took the XO's number while the order stayed indexed under its own.
        const merged: OrderRequest = {
          ...step.existing.request,
          ...stripUndefined(step.order.request),
          action: step.existing.request.action,
          placerOrderNumber: step.existing.request.placerOrderNumber,
          fillerOrderNumber: step.existing.request.fillerOrderNumber,
          // A patient's identifiers change by ADT (A40), never by an order message (as A08
          // keeps them): an XO listing them in another order moved the order's record number.
          // The rest of the patient is the change's as it stands: a birth date or sex it no
          // longer states is taken away (upstream too), not kept from before.
          patient: {
            ...step.order.request.patient,
            identifiers: step.existing.request.patient.identifiers,
          },
        };
        await this.orders.updateRequest(
          step.orderId,
          merged,
          {
            accessionNumber: merged.accessionNumber ?? null,
            studyInstanceUid: merged.studyInstanceUid ?? null,
            patientId: primaryPatientId(merged.patient),
          },
          manager,
        );
        audit.push(
          {
            kind: 'order.updated',
            orderId: step.orderId,
            inboundMessageId: messageId,
            actor,
            summary: `order changed by ${input.messageType ?? input.transport}`,
            detail: { sourceRef: step.order.sourceRef },
          },
          {
            ...mappingEvent(step.orderId, input.mappingVersion, step.order.lineage),
            inboundMessageId: messageId,
          },
        );
        await this.jobs.enqueue(
          ORDER_JOBS.updateMetadata,
          { orderId: step.orderId },
          { manager, jobKey: `metadata:${step.orderId}` },
        );
      }
    }
    for (const { event, row } of plan.patientOrders) {
      const patient: PatientInfo =
        event.kind === 'patient-merge'
          ? {
              ...row.request.patient,
              ...stripUndefined(event.patient),
              identifiers: mergedIdentifiers(
                row.request.patient.identifiers,
                event.priorIdentifiers,
                event.patient.identifiers,
              ),
            }
          : withoutCleared(
              {
                ...row.request.patient,
                ...stripUndefined(event.patient),
                identifiers: row.request.patient.identifiers,
              },
              event.cleared,
            );
      const request: OrderRequest = { ...row.request, patient };
      // What the merge took from the order stays known as this patient's: the upstream's
      // report written from the create names it (fetch-documents compares with both).
      const retired =
        event.kind === 'patient-merge'
          ? retiredOf(row.request.patient.identifiers, event.priorIdentifiers)
          : [];
      await this.orders.updatePatient(row.id, request, primaryPatientId(patient), manager, retired);
      audit.push(
        {
          kind: 'order.updated',
          orderId: row.id,
          inboundMessageId: messageId,
          actor,
          summary:
            event.kind !== 'patient-merge'
              ? `demographics updated (ADT^${event.trigger ?? 'A08'})`
              : event.trigger === 'A47'
                ? "patient identifier changed (ADT^A47): the order is known by the patient's corrected identifier"
                : 'patient merged (ADT^A40): order moved to the surviving patient',
          detail: {
            event: event.kind,
            ...(event.kind === 'patient-merge' && event.trigger ? { trigger: event.trigger } : {}),
          },
        },
        {
          ...mappingEvent(row.id, input.mappingVersion, event.lineage),
          inboundMessageId: messageId,
        },
      );
      await this.jobs.enqueue(
        ORDER_JOBS.updateMetadata,
        { orderId: row.id },
        { manager, jobKey: `metadata:${row.id}` },
      );
    }
    for (const { event, row } of plan.patientOrdersElsewhere ?? []) {
      const named =
        event.kind === 'patient-merge' ? event.priorIdentifiers : event.patient.identifiers;
      const theirs = primaryIdentifier(row.request.patient)?.system;
      audit.push({
        kind: 'order.change-refused',
        orderId: row.id,
        inboundMessageId: messageId,
        actor,
        severity: 'warning',
        summary: `${event.kind !== 'patient-merge' ? `demographics update (ADT^${event.trigger ?? 'A08'})` : event.trigger === 'A47' ? 'identifier change (ADT^A47)' : 'merge (ADT^A40)'} not applied: the patient number is the order's, its assigning authority is not`,
        detail: {
          event: event.kind,
          reason: 'other-assigning-authority',
          messageAuthorities: [...new Set(named.map((i) => i.system ?? ''))],
          orderAuthority: theirs ?? '',
        },
      });
    }
    for (const step of plan.replacements ?? []) {
      audit.push(...(await this.replace(manager, input, messageId, step)));
    }
    await writeAuditEvents(manager, audit);
  }

  /**
   * One request a new order replaces: the old order's cancel requested as a revoke of it would
   * be (the cancel job cancels upstream when placed, else ends it here; the Task and report say
   * cancelled), and both timelines saying which replaced which, or why nothing was cancelled.
   */
  private async replace(
    manager: EntityManager,
    input: IntakeInput,
    messageId: string,
    step: ReplaceStep,
  ): Promise<AuditEventInput[]> {
    const actor = input.actor ?? input.sender;
    const wording = REPLACE_WORDING[step.outcome];
    const fill = (text: string) =>
      text
        .replace('{old}', step.replacedId ?? '')
        .replace('{new}', step.orderId)
        .replace('{state}', step.replacedState ?? '');
    const detail = {
      outcome: step.outcome,
      element: step.target.element,
      named: step.target.named,
      sourceRef: step.sourceRef,
      replacedBy: step.orderId,
      ...(step.replacedId ? { replaced: step.replacedId, replacedState: step.replacedState } : {}),
    };
    const events: AuditEventInput[] = [
      {
        kind: 'order.replaces',
        orderId: step.orderId,
        inboundMessageId: messageId,
        actor,
        severity: wording.severity,
        summary: fill(wording.replaces),
        detail,
      },
    ];
    if (step.replacedId && wording.replaced) {
      events.push({
        kind: 'order.replaced',
        orderId: step.replacedId,
        inboundMessageId: messageId,
        actor,
        severity: wording.severity,
        summary: fill(wording.replaced),
        detail,
      });
    }
    if (step.outcome !== 'cancel' || !step.replacedId) return events;
    await this.orders.requestCancelAsReplaced(
      step.replacedId,
      step.orderId,
      `replaced by order ${step.orderId} (${input.messageType ?? input.transport} from ${input.sender ?? 'unknown'})`,
      manager,
    );
    events.push({
      kind: 'order.cancel-requested',
      orderId: step.replacedId,
      inboundMessageId: messageId,
      actor,
      summary: `cancel requested by ${actor ?? 'the orderer'}: replaced by order ${step.orderId}`,
      detail: {
        sourceRef: step.sourceRef,
        stateAtRequest: step.replacedState,
        replacedBy: step.orderId,
      },
    });
    await this.jobs.enqueue(
      ORDER_JOBS.cancel,
      { orderId: step.replacedId },
      { manager, jobKey: `cancel:${step.replacedId}` },
    );
    return events;
  }
}

/** The patient without the demographics an ADT^A08 deleted (explicit null `""`). */
function withoutCleared(
  patient: PatientInfo,
  cleared: ReadonlyArray<'birthDate' | 'sex'> | undefined,
): PatientInfo {
  const out = { ...patient };
  for (const key of cleared ?? []) delete out[key];
  return out;
}
