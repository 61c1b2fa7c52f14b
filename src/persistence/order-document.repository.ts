import type { EntityManager } from 'typeorm';
import { RepositoryBase } from './repository-base';

/**
 * `order_documents`: results, failure and QC reports fetched from upstream, keyed by the
 * status-mapping row they were fetched for (`upstream_status`).
 */
export class OrderDocumentRepository extends RepositoryBase {
  async storedFor(
    orderId: string,
    storedAs: string,
    manager?: EntityManager,
  ): Promise<Array<{ kind: string; report_type: string }>> {
    return this.db(manager).query(
      `SELECT kind, report_type FROM order_documents WHERE order_id = $1 AND upstream_status = $2`,
      [orderId, storedAs],
    );
  }

  /** Stores a document once; its id, or undefined when it was already stored. */
  async insertOnce(
    doc: {
      orderId: string;
      storedAs: string;
      kind: string;
      reportType: string;
      contentType: string;
      body: Buffer;
    },
    manager?: EntityManager,
  ): Promise<{ id: string } | undefined> {
    const rows: Array<{ id: string }> = await this.db(manager).query(
      `INSERT INTO order_documents (order_id, upstream_status, kind, report_type, content_type, body)
           VALUES ($1, $2, $3, $4, $5, $6)
           ON CONFLICT (order_id, upstream_status, kind, report_type) DO NOTHING
           RETURNING id`,
      [doc.orderId, doc.storedAs, doc.kind, doc.reportType, doc.contentType, doc.body],
    );
    return rows[0];
  }

  /** `upstream_order_id|kind` pairs of the documents stored for these upstream orders. */
  async storedKindsOfUpstreamOrders(
    upstreamOrderIds: string[],
    manager?: EntityManager,
  ): Promise<Array<{ upstream_order_id: string; kind: string }>> {
    return this.db(manager).query(
      `SELECT DISTINCT o.upstream_order_id, d.kind FROM order_documents d JOIN orders o ON o.id = d.order_id
          WHERE o.upstream_order_id = ANY($1::text[])`,
      [upstreamOrderIds],
    );
  }
}
