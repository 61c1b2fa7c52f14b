import type { AuditEventInput } from '../../persistence/audit-event.repository';
import type { MappedField } from '../../domain/order-request';
import {
  ORDER_JOBS,
  primaryPatientId,
  type IntakeInput,
  type IntakeResponse,
} from '../intake.model';
import type { CreateStep, IntakePlan } from './intake-decision';

/** The audit event of a cancel or change that came after the order ended (not applied). */
const TOO_LATE = {
  'cancel-too-late': { kind: 'order.cancel-refused', summary: 'cancel refused' },
  'change-too-late': { kind: 'order.change-refused', summary: 'change not applied' },
} as const;

/**
 * The order's timeline event of a cancel or change that came after the order ended: written
 * with the accepted message (HL7 UC / UX) and with the refused one (FHIR 409), so the analyst
 * reads the same event whichever door the cancel came in by. No PHI: the state and the
 * reference of the resource or message, nothing of the order's content.
 */
export function tooLateEvent(
  late: {
    kind: keyof typeof TOO_LATE;
    orderId: string;
    state: string;
    sourceRef: string;
    cancelRequested?: boolean;
  },
  actor: string | null | undefined,
): AuditEventInput {
  // a cancel of a cancelled order asks for what holds: not a warning for the analyst
  const moot = late.kind === 'cancel-too-late' && late.state === 'cancelled';
  return {
    kind: TOO_LATE[late.kind].kind,
    orderId: late.orderId,
    severity: moot ? 'info' : 'warning',
    actor,
    summary: moot
      ? 'cancel not needed: the order is already cancelled'
      : late.cancelRequested
        ? `${TOO_LATE[late.kind].summary}: the order's cancel was requested`
        : `${TOO_LATE[late.kind].summary}: the order is already ${late.state}`,
    detail: {
      sourceRef: late.sourceRef,
      state: late.state,
      ...(late.cancelRequested ? { cancelRequested: true } : {}),
    },
  };
}

/** The new orders, audit events and jobs of a plan, as JSON arrays for one statement. */
export function intakeRows(
  input: IntakeInput,
  plan: IntakePlan,
  response: IntakeResponse,
): { orders: string; audit: string; jobs: string } {
  const actor = input.actor ?? input.sender;
  const creates = plan.steps.filter((s): s is CreateStep => s.kind === 'create');
  const orders = creates.map((c) => {
    const req = c.order.request;
    return {
      id: c.orderId,
      source: req.source,
      accession_number: req.accessionNumber ?? null,
      patient_id: primaryPatientId(req.patient),
      placer_order_number: req.placerOrderNumber?.value ?? null,
      filler_order_number: req.fillerOrderNumber?.value ?? null,
      placer_group_number: req.placerGroupNumber?.value ?? null,
      study_instance_uid: req.studyInstanceUid ?? null,
      request: req,
    };
  });
  const audit: AuditEventInput[] = [
    {
      kind: 'inbound.received',
      actor,
      summary: `${input.messageType ?? input.transport} received from ${input.sender ?? 'unknown sender'}`,
      detail: {
        transport: input.transport,
        messageControlId: input.messageControlId,
        bytes: input.raw.length,
        orders: input.orders.length,
        answer: response.code,
      },
    },
  ];
  if (input.quirks.length > 0) {
    audit.push({
      kind: 'inbound.quirks',
      severity: 'warning',
      summary: `tolerated: ${input.quirks.map((q) => q.code).join(', ')}`,
      detail: { quirks: input.quirks },
    });
  }
  for (const step of plan.steps) {
    switch (step.kind) {
      case 'create':
        audit.push(
          {
            kind: 'order.created',
            orderId: step.orderId,
            actor,
            summary: `order created from ${step.order.sourceRef}`,
            detail: {
              sourceRef: step.order.sourceRef,
              products: step.order.request.products,
              state: 'received',
            },
          },
          mappingEvent(step.orderId, input.mappingVersion, step.order.lineage),
        );
        break;
      case 'duplicate-create':
        audit.push({
          kind: 'order.duplicate',
          orderId: step.orderId,
          severity: 'warning',
          actor,
          summary: `new order for a placer number already known (state ${step.state}): not created again`,
          detail: { sourceRef: step.order.sourceRef },
        });
        break;
      case 'status':
        audit.push({
          kind: 'order.status-recorded',
          orderId: step.orderId,
          actor,
          summary: `status message recorded${step.orderId ? '' : ' (no matching order)'}`,
          detail: { sourceRef: step.order.sourceRef },
        });
        break;
      case 'cancel-too-late':
      case 'change-too-late':
        audit.push(
          tooLateEvent(
            {
              kind: step.kind,
              orderId: step.orderId,
              state: step.state,
              sourceRef: step.order.sourceRef,
              cancelRequested: 'cancelRequested' in step && step.cancelRequested === true,
            },
            actor,
          ),
        );
        break;
      case 'change-refused':
        // Where the answer refuses the message (HL7 AE, FHIR 409) nothing of this is written;
        // a Subscription notification is accepted whole, and the order's timeline says why.
        audit.push({
          kind: step.result.action === 'cancel' ? 'order.cancel-refused' : 'order.change-refused',
          orderId: step.orderId,
          severity: 'warning',
          actor,
          summary:
            step.result.reason === 'other-patient'
              ? `${step.result.action} not applied: it names another patient`
              : step.result.reason === 'study-used'
                ? `change not applied: it moves the ${step.result.field === 'accession-number' ? 'accession number' : 'Study Instance UID'} of an order whose study is already used`
                : step.result.reason === 'other-content'
                  ? `new order not created: its placer number names this order, whose ${step.result.content ?? 'content'} differs (a change sent as a new order)`
                  : `change not applied: the order already runs upstream with other AI products`,
          detail: {
            sourceRef: step.order.sourceRef,
            reason: step.result.reason,
            ...(step.result.field ? { field: step.result.field } : {}),
            ...(step.result.content ? { content: step.result.content } : {}),
          },
        });
        break;
      case 'cancel':
      case 'update':
      case 'unknown':
        break; // applied (and audited) by applyChanges, or refused
      default:
        step satisfies never;
    }
  }
  const jobs = creates.map((c) => ({
    task: ORDER_JOBS.place,
    payload: { orderId: c.orderId },
    job_key: `place:${c.orderId}`,
  }));
  return {
    orders: JSON.stringify(orders),
    audit: JSON.stringify(audit),
    jobs: JSON.stringify(jobs),
  };
}

/**
 * Longest lineage value kept in the audit event. The full value is in the stored order and
 * the raw message; the lineage says which field became which, so a 10 MB free text is not
 * copied a third time into every message's audit (issue #15: memory per message in flight).
 */
export const LINEAGE_VALUE_MAX_CHARS = 1_000;

export function mappingEvent(
  orderId: string,
  mappingVersion: string,
  lineage: MappedField[],
): AuditEventInput {
  return {
    kind: 'mapping.applied',
    orderId,
    summary: `${lineage.length} fields mapped by ${mappingVersion}`,
    detail: {
      mappingVersion,
      lineage: lineage.map((l) =>
        typeof l.value === 'string' && l.value.length > LINEAGE_VALUE_MAX_CHARS
          ? {
              ...l,
              value: `${l.value.slice(0, LINEAGE_VALUE_MAX_CHARS)}… (${l.value.length} characters in all)`,
            }
          : l,
      ),
    },
  };
}
