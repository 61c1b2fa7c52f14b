import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The audit search by patient identifier finds an order by any identifier of the patient it
 * was placed with (every PID-3 repetition, every Patient.identifier), not only by
 * `orders.patient_id`, the one record number the order is keyed by (domain/patient-identity.ts:
 * MR first, else the first that is no national or insurance number). An EMPI number in the
 * first PID-3 repetition, or the SSN after the MR, found nothing.
 *
 * A GIN index (jsonb_path_ops) on the identifier values the order's request already holds:
 * nothing new to write on the ingest path or on a patient change (ADT A08/A40 rewrite the
 * request), and an order's state updates leave `request` alone, so they stay HOT.
 */
export class OrdersPatientIdentifiers20261127220000 implements MigrationInterface {
  name = 'OrdersPatientIdentifiers20261127220000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(
      `CREATE INDEX orders_patient_identifiers_idx ON orders
         USING gin ((jsonb_path_query_array(request, '$.patient.identifiers[*].value')) jsonb_path_ops)`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX orders_patient_identifiers_idx`);
  }
}
