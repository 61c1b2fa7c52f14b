import type { EntityManager } from 'typeorm';
import { namesRecord, primaryIdentifier } from '../../domain/patient-identity';
import type { IntakeOrderRow, OrderRepository } from '../../persistence/order.repository';
import type { Identifier } from '../../domain/order-request';
import type { IntakeInput, IntakeOrderResult, IntakePatientEvent } from '../intake.model';
import { decide, type IntakePlan, type PlannedStep } from './intake-decision';
import { decideReplace, type ReplaceStep } from './replace-decision';

type OrderRow = IntakeOrderRow;

/** Reads (and locks) what a message refers to, then decides (intake-decision) per order group. */
export class IntakePlanner {
  constructor(private readonly orders: OrderRepository) {}

  /** Reads (and locks) the orders the message refers to and decides what each group does. */
  async plan(manager: EntityManager, input: IntakeInput): Promise<IntakePlan> {
    const placers = [
      ...new Set(
        input.orders
          .map((o) => o.request.placerOrderNumber?.value)
          .filter((v): v is string => Boolean(v)),
      ),
    ];
    // Every order under each number, newest first: the number's namespace picks among them.
    const byPlacer = new Map<string, Array<OrderRow & { placer_order_number: string }>>();
    if (placers.length > 0) {
      const rows = await this.orders.lockAndFindByPlacers(input.sender, placers, manager);
      for (const row of rows) {
        const list = byPlacer.get(row.placer_order_number);
        if (list) list.push(row);
        else byPlacer.set(row.placer_order_number, [row]);
      }
    }
    // A new order without a placer number (a RIS-originated walk-in) is known by the sender's
    // filler number: a resend under a new MSH-10 made a second order (and a second analysis).
    const fillerKeyOf = (req: IntakeInput['orders'][number]['request']) =>
      req.action === 'create' && !req.placerOrderNumber?.value && req.fillerOrderNumber?.value
        ? req.fillerOrderNumber
        : undefined;
    const fillerKeys = [
      ...new Set(
        input.orders.flatMap((o) => {
          const key = fillerKeyOf(o.request);
          return key ? [key.value] : [];
        }),
      ),
    ];
    if (fillerKeys.length > 0)
      await this.orders.lockFillerNumbers(input.sender, fillerKeys, manager);
    const steps: PlannedStep[] = [];
    const results: IntakeOrderResult[] = [];
    const createdPlacers: Array<{ placer: Identifier; orderId: string }> = [];
    const createdFillers: Array<{ filler: Identifier; orderId: string }> = [];
    // Orders an earlier group of this message cancels: a later group is decided against the
    // order as that cancel leaves it (cancel requested), as a later message would be. Before,
    // a CA and the reorder (NW) under the same number in one message decided the NW against
    // the order as it stood: AE 205 with another accession (the cancel refused with it), or
    // ORC OK "already known" for the order being cancelled, the reorder lost.
    const cancelledHere = new Set<string>();
    // The orders this message creates, as a later group of it finds them (received, not placed)
    const createdRows = new Map<string, OrderRow>();
    for (const order of input.orders) {
      const req = order.request;
      const placerId = req.placerOrderNumber?.value ? req.placerOrderNumber : undefined;
      const fillerKey = fillerKeyOf(req);
      let existing: OrderRow | undefined = placerId
        ? (byPlacer.get(placerId.value) ?? []).find((row) =>
            sameOrderNumber(placerId, storedPlacer(row)),
          )
        : undefined;
      if (!existing && fillerKey) {
        existing = await this.findByFiller(manager, fillerKey, input.sender);
      }
      if (!existing && req.action !== 'create' && req.fillerOrderNumber?.value) {
        existing = await this.findByFiller(manager, req.fillerOrderNumber, input.sender);
      }
      // A conditional create's match (FHIR If-None-Exist, found by any identifier it names)
      if (!existing && req.action === 'create' && order.conditional && order.targetOrderId) {
        existing = await this.findByFiller(manager, { value: order.targetOrderId }, input.sender);
      }
      if (!existing && req.action !== 'create' && order.targetOrderId) {
        existing = await this.findByFiller(manager, { value: order.targetOrderId }, input.sender);
      }
      // the newest order an earlier group of this message created under the number
      const newest = <T>(list: T[], same: (c: T) => boolean) => list.findLast(same);
      const createdHere = placerId
        ? newest(createdPlacers, (c) => sameOrderNumber(placerId, c.placer))?.orderId
        : fillerKey
          ? newest(createdFillers, (c) => sameOrderNumber(fillerKey, c.filler))?.orderId
          : undefined;
      // A cancel or change of an order an earlier group of this message created (NW then CA,
      // NW then XO) is decided against that order, as the next message would find it: it is
      // the newest under its number. Before, such a cancel was AE 204 "unknown order" (the
      // order was looked for in the database only) and the whole message was refused, the NW
      // with it; after a CA of an order made here, a later NW makes a new one (as CA then NW).
      const namedFiller = req.action !== 'create' ? req.fillerOrderNumber : undefined;
      const madeHere =
        createdHere ??
        (!placerId && namedFiller?.value
          ? newest(createdFillers, (c) => sameOrderNumber(namedFiller, c.filler))?.orderId
          : undefined);
      const made = madeHere === undefined ? undefined : createdRows.get(madeHere);
      const againstMade = made && (req.action !== 'create' || cancelledHere.has(made.id));
      if (againstMade) existing = made;
      const cancelledEarlier = existing !== undefined && cancelledHere.has(existing.id);
      const step = decide(order, existing, againstMade ? undefined : createdHere, cancelledEarlier);
      if (step.kind === 'cancel') cancelledHere.add(step.orderId);
      if (step.kind === 'create' && placerId)
        createdPlacers.push({ placer: placerId, orderId: step.orderId });
      if (step.kind === 'create' && fillerKey)
        createdFillers.push({ filler: fillerKey, orderId: step.orderId });
      if (step.kind === 'create')
        createdRows.set(step.orderId, {
          id: step.orderId,
          state: 'received',
          upstream_order_id: null,
          place_attempted_at: null,
          cancel_requested_at: null,
          request: req,
        });
      steps.push(step);
      results.push(step.result);
    }
    const replacements = await this.planReplaces(manager, input, steps, cancelledHere);
    // Each event with its own orders: an A40 of two PID/MRG pairs moves the first prior
    // patient's orders to the first surviving patient only. Before, every event was applied
    // to the orders of all of them, and the first patient's orders ended under the second.
    const patientOrders: IntakePlan['patientOrders'] = [];
    const patientOrdersElsewhere: IntakePlan['patientOrdersElsewhere'] = [];
    for (const event of input.patientEvents ?? []) {
      const found = await this.findOpenOrdersOfPatient(manager, event);
      for (const row of found.mine) patientOrders.push({ event, row });
      for (const row of found.elsewhere) patientOrdersElsewhere.push({ event, row });
    }
    return {
      steps,
      outcome: { results, patientOrdersUpdated: patientOrders.length },
      patientOrders,
      patientOrdersElsewhere,
      replacements,
    };
  }

  /**
   * What becomes of the requests each new or changed order replaces (FHIR `replaces`): the
   * orders named are locked, then decided one by one (replace-decision.ts). An order cancelled
   * here as replaced counts as cancelled for the rest of the message.
   */
  private async planReplaces(
    manager: EntityManager,
    input: IntakeInput,
    steps: PlannedStep[],
    cancelledHere: Set<string>,
  ): Promise<ReplaceStep[]> {
    const named = steps.flatMap((s) =>
      (s.kind === 'create' || s.kind === 'update') && s.order.replaces?.length
        ? s.order.replaces.flatMap((r) => (r.orderId ? [r.orderId] : []))
        : [],
    );
    if (!steps.some((s) => s.order.replaces?.length)) return [];
    const rows = new Map(
      (await this.orders.lockForReplace([...new Set(named)], manager)).map((r) => [r.id, r]),
    );
    const out: ReplaceStep[] = [];
    for (const step of steps) {
      if (step.kind !== 'create' && step.kind !== 'update') continue;
      for (const target of step.order.replaces ?? []) {
        const row = target.orderId ? rows.get(target.orderId) : undefined;
        const decided = decideReplace(
          step.orderId,
          step.order.sourceRef,
          step.order.request,
          input.sender,
          target,
          row,
          row !== undefined && cancelledHere.has(row.id),
        );
        if (decided.outcome === 'cancel') cancelledHere.add(decided.replacedId!);
        out.push(decided);
      }
    }
    return out;
  }

  /**
   * The newest order of the sender under this filler number in its namespace (an EI, as the
   * placer number: sameOrderNumber), or the order with that id (our id, sent as the filler
   * number of an order that came without one).
   */
  private async findByFiller(
    manager: EntityManager,
    filler: Identifier,
    sender: string | null,
  ): Promise<OrderRow | undefined> {
    const rows = await this.orders.findByFillerForUpdate(filler.value, sender, manager);
    return rows.find((row) => {
      if (row.id === filler.value) return true;
      const held = row.request.fillerOrderNumber;
      const stored: Identifier =
        held?.value === row.filler_order_number && held.system !== undefined
          ? { value: held.value, system: held.system }
          : { value: row.filler_order_number ?? '' };
      return sameOrderNumber(filler, stored);
    });
  }

  private async findOpenOrdersOfPatient(
    manager: EntityManager,
    event: IntakePatientEvent,
  ): Promise<{ mine: OrderRow[]; elsewhere: OrderRow[] }> {
    const named =
      event.kind === 'patient-merge' ? event.priorIdentifiers : event.patient.identifiers;
    const ids = named.map((i) => i.value);
    if (ids.length === 0) return { mine: [], elsewhere: [] };
    // The number alone finds the candidates (orders.patient_id); an order is this patient's
    // only when the assigning authority agrees too. Before, an A08 or A40 from one facility
    // renamed or moved the open orders of another facility's patient with the same number.
    const rows = await this.orders.openOrdersOfPatientsForUpdate(ids, manager);
    const mine: OrderRow[] = [];
    const elsewhere: OrderRow[] = [];
    for (const row of rows)
      (namesRecord(named, primaryIdentifier(row.request.patient)) ? mine : elsewhere).push(row);
    return { mine, elsewhere };
  }
}

/**
 * The number a stored order is indexed under, with the system its request holds for it (an
 * order changed before its numbers were kept may hold another number in its request: then
 * the index's number alone).
 */
function storedPlacer(row: OrderRow & { placer_order_number: string }): Identifier {
  const held = row.request.placerOrderNumber;
  return held?.value === row.placer_order_number && held.system !== undefined
    ? { value: row.placer_order_number, system: held.system }
    : { value: row.placer_order_number };
}

/** An ISO OID (HD universal ID), as opposed to a namespace ID (a name). */
const OID = /^[0-2](\.(0|[1-9]\d*))+$/;

/**
 * Whether a message's order number names a stored order's: a placer (or filler) number is an EI
 * (v2.5.1 2A.3.24), unique only within the application that assigned it (§4.5.1.2: ORC-2.2 the
 * namespace ID, else ORC-2.3/2.4 its universal ID). An interface engine forwards the orders of
 * several placer applications under one MSH-3/MSH-4, each numbering from 1: `7001^AMB_EHR` and
 * `7001^CARDIO` are two orders (before, the second was answered "already known" and never
 * ordered, and a cancel of one cancelled the newer of the two). A number without a system (a RIS
 * that sends the bare number in a cancel), or systems of two kinds (a namespace and an OID, two
 * ways to name one application), match by the number.
 */
export function sameOrderNumber(asked: Identifier, stored: Identifier | undefined): boolean {
  if (!stored || asked.value !== stored.value) return false;
  if (asked.system === undefined || stored.system === undefined) return true;
  if (OID.test(asked.system) !== OID.test(stored.system)) return true;
  return asked.system === stored.system;
}
