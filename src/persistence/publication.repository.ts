import type { EntityManager } from 'typeorm';
import type { OrderRequest } from '../domain/order-request';
import { RepositoryBase } from './repository-base';

/**
 * What a publication reads at delivery time (the order, its documents, its original message,
 * its acquired study, its FHIR ServiceRequest) and the one write back: our own
 * ServiceRequest's status when the order ends.
 */

/** The order joined with its original message and its study acquisition. */
export interface PublicationOrderRow<S = unknown> {
  id: string;
  source: string;
  request: OrderRequest;
  accession_number: string | null;
  placer_order_number: string | null;
  filler_order_number: string | null;
  study_instance_uid: string | null;
  created_at: Date;
  raw: Buffer | null;
  transport: string | null;
  study: S | null;
}

export interface PublicationDocumentRow {
  kind: string;
  report_type: string;
  body: Buffer;
}

export interface ServiceRequestRow {
  id: string;
  source_url: string | null;
  resource: { subject?: { reference?: string } };
}

/** The order's state and QC bypass, read on the caller's transaction. */
export interface OrderPublicationState<B = unknown> {
  state: string;
  qc_bypass: B | null;
}

export class PublicationRepository extends RepositoryBase {
  async findOrder<S>(orderId: string): Promise<PublicationOrderRow<S> | undefined> {
    const rows: PublicationOrderRow<S>[] = await this.db().query(
      `SELECT o.id, o.source, o.request, o.accession_number, o.placer_order_number, o.filler_order_number,
            o.study_instance_uid, o.created_at, m.raw, m.transport, a.study
       FROM orders o
       LEFT JOIN inbound_messages m ON m.id = o.inbound_message_id
       LEFT JOIN study_acquisitions a ON a.order_id = o.id
      WHERE o.id = $1`,
      [orderId],
    );
    return rows[0];
  }

  /** The order's documents among `documentIds`. */
  async findDocuments(
    documentIds: readonly string[],
    orderId: string,
  ): Promise<PublicationDocumentRow[]> {
    return this.db().query(
      `SELECT kind, report_type, body FROM order_documents WHERE id = ANY($1::bigint[]) AND order_id = $2`,
      [documentIds, orderId],
    );
  }

  /** The ServiceRequest the order came as (FHIR orders), if stored. */
  async findServiceRequest(orderId: string): Promise<ServiceRequestRow | undefined> {
    const srs: ServiceRequestRow[] = await this.db().query(
      `SELECT id, source_url, resource FROM fhir_resources WHERE order_id = $1 AND resource_type = 'ServiceRequest' LIMIT 1`,
      [orderId],
    );
    return srs[0];
  }

  /** Sets our own ServiceRequest's status (a new version) unless it already has it. */
  async setServiceRequestStatus(id: string, status: string): Promise<void> {
    await this.db().query(
      `UPDATE fhir_resources
          SET resource = jsonb_set(resource, '{status}', to_jsonb($2::text)),
              version_id = version_id + 1, last_updated = now()
        WHERE resource_type = 'ServiceRequest' AND id = $1 AND resource->>'status' IS DISTINCT FROM $2`,
      [id, status],
    );
  }

  async orderState<B>(
    orderId: string,
    manager?: EntityManager,
  ): Promise<OrderPublicationState<B> | undefined> {
    const rows: OrderPublicationState<B>[] = await this.db(manager).query(
      `SELECT state, qc_bypass FROM orders WHERE id = $1`,
      [orderId],
    );
    return rows[0];
  }
}
