import type { EntityManager } from 'typeorm';
import { namesRecord, primaryIdentifier } from '../../domain/patient-identity';
import type { IntakeOrderRow, OrderRepository } from '../../persistence/order.repository';
import type { IntakeInput, IntakeOrderResult, IntakePatientEvent } from '../intake.model';
import { decide, type IntakePlan, type PlannedStep } from './intake-decision';

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
    const byPlacer = new Map<string, OrderRow>();
    if (placers.length > 0) {
      const rows = await this.orders.lockAndFindByPlacers(input.sender, placers, manager);
      for (const row of rows)
        if (!byPlacer.has(row.placer_order_number)) byPlacer.set(row.placer_order_number, row);
    }
    // A new order without a placer number (a RIS-originated walk-in) is known by the sender's
    // filler number: a resend under a new MSH-10 made a second order (and a second analysis).
    const fillerKeyOf = (req: IntakeInput['orders'][number]['request']) =>
      req.action === 'create' && !req.placerOrderNumber?.value
        ? req.fillerOrderNumber?.value || undefined
        : undefined;
    const fillerKeys = [
      ...new Set(
        input.orders.map((o) => fillerKeyOf(o.request)).filter((v): v is string => Boolean(v)),
      ),
    ];
    if (fillerKeys.length > 0)
      await this.orders.lockFillerNumbers(input.sender, fillerKeys, manager);
    const steps: PlannedStep[] = [];
    const results: IntakeOrderResult[] = [];
    const createdPlacers = new Map<string, string>();
    const createdFillers = new Map<string, string>();
    for (const order of input.orders) {
      const req = order.request;
      const placer = req.placerOrderNumber?.value;
      const fillerKey = fillerKeyOf(req);
      let existing = placer ? byPlacer.get(placer) : undefined;
      if (!existing && fillerKey) {
        existing = await this.findByFiller(manager, fillerKey, input.sender);
      }
      if (!existing && req.action !== 'create' && req.fillerOrderNumber?.value) {
        existing = await this.findByFiller(manager, req.fillerOrderNumber.value, input.sender);
      }
      if (!existing && req.action !== 'create' && order.targetOrderId) {
        existing = await this.findByFiller(manager, order.targetOrderId, input.sender);
      }
      const createdHere = placer
        ? createdPlacers.get(placer)
        : fillerKey
          ? createdFillers.get(fillerKey)
          : undefined;
      const step = decide(order, existing, createdHere);
      if (step.kind === 'create' && placer) createdPlacers.set(placer, step.orderId);
      if (step.kind === 'create' && fillerKey) createdFillers.set(fillerKey, step.orderId);
      steps.push(step);
      results.push(step.result);
    }
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
    };
  }

  private async findByFiller(
    manager: EntityManager,
    filler: string,
    sender: string | null,
  ): Promise<OrderRow | undefined> {
    return this.orders.findByFillerForUpdate(filler, sender, manager);
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
