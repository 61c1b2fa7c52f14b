import type { Resource, ServiceRequest } from '@medplum/fhirtypes';
import type { EntityManager } from 'typeorm';
import type { OrderState } from '../domain/order-state';
import type { OrderRequest } from '../domain/order-request';
import { pgJson } from '../common/pg-safe';
import { composedIdentifier } from '../domain/identifier-form';
import { RepositoryBase } from './repository-base';

/** The source version of a request deleted on the EHR (by a DELETE or a 410 of its focus). */
export const DELETED_ON_EHR = 'deleted-on-ehr';

export interface StoredResource<T extends Resource = Resource> {
  id: string;
  orderId: string | null;
  sender: string | null;
  versionId: number;
  lastUpdated: Date;
  sourceUrl: string | null;
  sourceVersion: string | null;
  resource: T;
}

export interface OrderForTask {
  orderId: string;
  state: OrderState;
  upstreamStatus: string | null;
  version: number;
  createdAt: Date;
  updatedAt: Date;
  request: OrderRequest;
  serviceRequestId: string | null;
  /** Who submitted the order (a sender token reads only its own). */
  sender: string | null;
  /** The order that replaced this one (FHIR `replaces`), when one did. */
  replacedBy?: string | null;
}

interface ResourceRow {
  id: string;
  order_id: string | null;
  sender: string | null;
  version_id: number;
  last_updated: Date;
  source_url: string | null;
  source_version: string | null;
  resource: Resource;
}

function toStored<T extends Resource>(row: ResourceRow): StoredResource<T> {
  return {
    id: row.id,
    orderId: row.order_id,
    sender: row.sender,
    versionId: row.version_id,
    lastUpdated: row.last_updated,
    sourceUrl: row.source_url,
    sourceVersion: row.source_version,
    resource: row.resource as T,
  };
}

/**
 * Whether the row's resource carries an identifier with the system and value of the jsonb
 * parameter `p` (`{"system": …, "value": …}`, composed: composedKey), compared in one form,
 * NFC (src/domain/identifier-form.ts). The resource keeps the identifiers as its sender wrote
 * them; a containment match (`@>`) compared code points, and an EHR's retry written
 * decomposed (`E` + U+0301) did not find the request its composed create made.
 */
const CARRIES_IDENTIFIER = (p: string) => `EXISTS (
  SELECT 1 FROM jsonb_array_elements(CASE jsonb_typeof(resource -> 'identifier')
                                       WHEN 'array' THEN resource -> 'identifier' ELSE '[]'::jsonb END) AS i
   WHERE jsonb_typeof(i -> 'system') = 'string' AND jsonb_typeof(i -> 'value') = 'string'
     AND normalize(i ->> 'system', NFC) = ${p}::jsonb ->> 'system'
     AND normalize(i ->> 'value', NFC) = ${p}::jsonb ->> 'value')`;

/** The key CARRIES_IDENTIFIER compares with: system and value composed. */
function composedKey(id: { system?: string; value?: string }): string {
  return pgJson({ system: composedIdentifier(id.system), value: composedIdentifier(id.value) });
}

/**
 * The ServiceRequests the FHIR front door serves (versioned, table fhir_resources) and the
 * orders read as Tasks. Writes take the intake transaction's manager.
 */
export class FhirResourceRepository extends RepositoryBase {
  async findServiceRequest(id: string): Promise<StoredResource<ServiceRequest> | undefined> {
    const rows: ResourceRow[] = await this.db().query(
      `SELECT * FROM fhir_resources WHERE resource_type = 'ServiceRequest' AND id = $1`,
      [id],
    );
    return rows[0] ? toStored<ServiceRequest>(rows[0]) : undefined;
  }

  async findServiceRequestByOrder(
    orderId: string,
  ): Promise<StoredResource<ServiceRequest> | undefined> {
    const rows: ResourceRow[] = await this.db().query(
      `SELECT * FROM fhir_resources WHERE resource_type = 'ServiceRequest' AND order_id = $1 LIMIT 1`,
      [orderId],
    );
    return rows[0] ? toStored<ServiceRequest>(rows[0]) : undefined;
  }

  /**
   * The ServiceRequest we keep per EHR URL. A request deleted on the EHR and made again under
   * its id has two rows (the deleted one's order cancelled), a request first seen as no order
   * (revoked) and then ordered too; the current one is the row not deleted, with an order,
   * else the latest (the Map keeps the last row of each URL).
   */
  async findBySourceUrls(urls: string[]): Promise<Map<string, StoredResource<ServiceRequest>>> {
    if (urls.length === 0) return new Map();
    const rows: ResourceRow[] = await this.db().query(
      `SELECT * FROM fhir_resources WHERE resource_type = 'ServiceRequest' AND source_url = ANY($1::text[])
        ORDER BY source_version IS NOT DISTINCT FROM $2 DESC, order_id IS NOT NULL, last_updated, version_id`,
      [urls, DELETED_ON_EHR],
    );
    return new Map(rows.map((r) => [r.source_url!, toStored<ServiceRequest>(r)]));
  }

  /**
   * A ServiceRequest we serve that carries one of these business identifiers (system and
   * value): the REST door's request under a placer number (callers pass that one). With
   * `sender`, only the requests that sender submitted (its orders are its own: one placer
   * number may name another sender's order too). Not for requests from the EHR: they are
   * known by URL, else findPostedServiceRequestsByIdentifier (never by any shared identifier:
   * one accession covers several requested procedures).
   */
  async findServiceRequestByIdentifier(
    identifiers: Array<{ system?: string; value?: string }>,
    sender?: string,
  ): Promise<StoredResource<ServiceRequest> | undefined> {
    for (const id of identifiers) {
      if (!id.system || !id.value) continue;
      const rows: ResourceRow[] = await this.db().query(
        `SELECT * FROM fhir_resources WHERE resource_type = 'ServiceRequest'
            AND ${CARRIES_IDENTIFIER('$1')} AND ($2::text IS NULL OR sender = $2)
          ORDER BY last_updated DESC LIMIT 1`,
        [composedKey(id), sender ?? null],
      );
      if (rows[0]) return toStored<ServiceRequest>(rows[0]);
    }
    return undefined;
  }

  /**
   * The requests with an order that carry this identifier (system and value) in any of their
   * identifiers, newest first (at most 20): those `sender` submitted, or those held under a URL
   * on the EHR (`sourceUrlPrefix`, `<FHIR_SERVER_URL>/ServiceRequest/`: notified by it, also
   * when another sender first POSTed them). The caller checks which identifier it is.
   */
  async findOrderedServiceRequestsCarrying(
    id: { system: string; value: string },
    whose: { sender: string } | { sourceUrlPrefix: string },
  ): Promise<Array<StoredResource<ServiceRequest>>> {
    const rows: ResourceRow[] = await this.db().query(
      `SELECT * FROM fhir_resources WHERE resource_type = 'ServiceRequest' AND order_id IS NOT NULL
          AND ${CARRIES_IDENTIFIER('$1')}
          AND ${'sender' in whose ? 'sender = $2' : 'left(source_url, length($2)) = $2'}
        ORDER BY last_updated DESC LIMIT 20`,
      [composedKey(id), 'sender' in whose ? whose.sender : whose.sourceUrlPrefix],
    );
    return rows.map((r) => toStored<ServiceRequest>(r));
  }

  /**
   * The requests we serve that were POSTed or PUT to us (no EHR URL) and carry this
   * identifier (system and value), newest first: the candidates for a request the EHR
   * notifies that first reached us by REST. A request read from the EHR under another URL is
   * another request there, whatever identifiers it shares. `sender`: only those it submitted.
   */
  async findPostedServiceRequestsByIdentifier(
    id: {
      system: string;
      value: string;
    },
    sender?: string,
  ): Promise<Array<StoredResource<ServiceRequest>>> {
    const rows: ResourceRow[] = await this.db().query(
      `SELECT * FROM fhir_resources WHERE resource_type = 'ServiceRequest' AND source_url IS NULL
          AND ${CARRIES_IDENTIFIER('$1')} AND ($2::text IS NULL OR sender = $2)
        ORDER BY last_updated DESC LIMIT 20`,
      [composedKey(id), sender ?? null],
    );
    return rows.map((r) => toStored<ServiceRequest>(r));
  }

  async insertServiceRequest(
    manager: EntityManager,
    row: {
      id: string;
      /** null: a request from the EHR that is no order here (kept for its version). */
      orderId: string | null;
      sender: string | null;
      resource: ServiceRequest;
      lastUpdated: string;
      sourceUrl?: string;
      sourceVersion?: string;
    },
  ): Promise<void> {
    await manager.query(
      `INSERT INTO fhir_resources (resource_type, id, order_id, sender, version_id, last_updated, source_url, source_version, resource)
       VALUES ('ServiceRequest', $1, $2, $3, 1, $4, $5, $6, $7::jsonb)`,
      [
        row.id,
        row.orderId,
        row.sender,
        row.lastUpdated,
        row.sourceUrl ?? null,
        row.sourceVersion ?? null,
        pgJson(row.resource),
      ],
    );
  }

  /** A new version (update or cancel); whether it was written (see fromVersion). */
  async updateServiceRequest(
    manager: EntityManager,
    row: {
      id: string;
      resource: ServiceRequest;
      versionId: number;
      lastUpdated: string;
      sourceVersion?: string;
      sourceUrl?: string;
      /**
       * Written only over this version (the one the change was made from): false, nothing
       * written, when another change took the resource past it in the meantime.
       */
      fromVersion?: number;
    },
  ): Promise<boolean> {
    const [, updated] = (await manager.query(
      `UPDATE fhir_resources SET resource = $2::jsonb, version_id = $3, last_updated = $4,
              source_version = coalesce($5, source_version), source_url = coalesce(source_url, $6)
        WHERE resource_type = 'ServiceRequest' AND id = $1
          AND ($7::int IS NULL OR version_id = $7::int)`,
      [
        row.id,
        pgJson(row.resource),
        row.versionId,
        row.lastUpdated,
        row.sourceVersion ?? null,
        row.sourceUrl ?? null,
        row.fromVersion ?? null,
      ],
    )) as [unknown, number];
    return updated > 0;
  }

  async orderForTask(orderId: string): Promise<OrderForTask | undefined> {
    const rows = await this.taskRows(`o.id::text = $1`, [orderId]);
    return rows[0];
  }

  async ordersForServiceRequest(serviceRequestId: string): Promise<OrderForTask[]> {
    return this.taskRows(`fr.id = $1`, [serviceRequestId]);
  }

  private async taskRows(where: string, params: unknown[]): Promise<OrderForTask[]> {
    const rows: Array<{
      id: string;
      state: OrderState;
      upstream_status: string | null;
      version: number;
      created_at: Date;
      updated_at: Date;
      request: OrderRequest;
      sr_id: string | null;
      sender: string | null;
      replaced_by: string | null;
    }> = await this.db().query(
      `SELECT o.id, o.state, o.upstream_status, o.version, o.created_at, o.updated_at, o.request, fr.id AS sr_id, o.sender, o.replaced_by
         FROM orders o
         LEFT JOIN fhir_resources fr ON fr.order_id = o.id AND fr.resource_type = 'ServiceRequest'
        WHERE ${where}`,
      params,
    );
    return rows.map((r) => ({
      orderId: r.id,
      state: r.state,
      upstreamStatus: r.upstream_status,
      version: r.version,
      createdAt: r.created_at,
      updatedAt: r.updated_at,
      request: r.request,
      serviceRequestId: r.sr_id,
      sender: r.sender,
      replacedBy: r.replaced_by,
    }));
  }
}
