import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import {
  FAILURE_REPORT_TYPES,
  QC_REPORT_TYPES,
  QC_ROUND_HEADER,
  QC_ROUNDS,
  REPORT_TYPES,
  type QcRound,
} from '../imaging-spec/imaging-spec';
import {
  readJsonObject,
  sendDocument,
  sendJson,
  type RequestContext,
  type Router,
} from './http-router';
import { DEFAULT_PRODUCTS, productsOf, sameProducts, validateMetadata } from './metadata-rules';
import {
  CONTENT_TYPES,
  renderDocument,
  type DocumentFormat,
  type SandboxDocument,
} from './report-documents';
import { batchDocument, failureDocument, qcReportBody, resultsDocument } from './report-builders';
import { metadataOf, studyUidOf } from './sandbox-state';
import { badRequest, conflict, notFound } from './sandbox.error';
import {
  ERR_AUTH,
  requireUuid,
  oneOf,
  locate,
  visibleReports,
  pageQuery,
  paginate,
  requireOwnOrganization,
  orderIdQuery,
  requiredOrderIdQuery,
  studyUidQuery,
} from './route-helpers';
import type { SandboxServices } from './sandbox-services';
import type { Principal } from './token-store';

/** The required `report_type` parameter of a report operation, for the OpenAPI description. */
const reportTypeQuery = (types: readonly string[]) => ({
  name: 'report_type',
  required: true,
  enum: types,
});

/** The `report_type` asked for, one of the formats the report comes in. */
const reportTypeOf = <T extends string>(ctx: RequestContext, types: readonly T[]): T =>
  oneOf<T>(ctx.query.get('report_type'), types, 'report_type');

/**
 * Serves a report document in the format asked for. Its `Content-Disposition` name holds only
 * ids, never patient data.
 */
function sendReport(
  res: ServerResponse,
  kind: string,
  id: string,
  type: DocumentFormat,
  document: SandboxDocument,
): void {
  sendDocument(res, 200, CONTENT_TYPES[type], renderDocument(document, type), {
    'Content-Disposition': `inline; filename="${kind}-${id}.${type.toLowerCase()}"`,
  });
}

/** Results, failure and QC reports, batches and their aggregated report, report polling. */
export function registerReportRoutes(router: Router, svc: SandboxServices): void {
  const { state, clock } = svc;
  /** A batch of the caller's organization; 404 for any other id. */
  const batchOf = (batchId: string, p: Principal) => {
    const batch = state.batches.get(batchId);
    if (!batch || batch.organizationId !== p.organizationId)
      throw notFound('batch_not_found', `no batch ${batchId}`);
    return batch;
  };
  router.add({
    method: 'GET',
    path: '/results',
    doc: {
      summary: 'The results report of a delivered order',
      permission: 'read',
      query: [orderIdQuery, studyUidQuery, reportTypeQuery(REPORT_TYPES)],
      responseContent: 'document',
      errors: [400, 404, 409, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const order = locate(svc, ctx, p, true);
      const type = reportTypeOf(ctx, REPORT_TYPES);
      if (order.status === 'EXPIRED')
        throw conflict(
          'report_not_available',
          'order expired; its results can no longer be retrieved',
        );
      if (order.status !== 'DELIVERED')
        throw conflict(
          'report_not_available',
          `order is ${order.status}; results exist once it is DELIVERED`,
        );
      sendReport(
        ctx.res,
        'results',
        order.orderId,
        type,
        resultsDocument(order, (ms) => clock.iso(ms)),
      );
    },
  });

  router.add({
    method: 'GET',
    path: '/failure-report',
    doc: {
      summary: 'The failure report of a failed order (QC rejections have none)',
      permission: 'read',
      query: [orderIdQuery, studyUidQuery, reportTypeQuery(FAILURE_REPORT_TYPES)],
      responseContent: 'document',
      errors: [400, 404, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const order = locate(svc, ctx, p, true);
      const type = reportTypeOf(ctx, FAILURE_REPORT_TYPES);
      if (!order.failure) {
        const why =
          order.status === 'QC_FAILED'
            ? 'QC rejections produce no failure report; see GET /qc-report'
            : `order is ${order.status} and has no failure report`;
        throw notFound('report_not_available', why);
      }
      sendReport(
        ctx.res,
        'failure-report',
        order.orderId,
        type,
        failureDocument(order, (ms) => clock.iso(ms)),
      );
    },
  });

  router.add({
    method: 'GET',
    path: '/qc-report',
    doc: {
      summary: 'QC report; header X-QC-Round names the round returned',
      permission: 'read',
      query: [
        requiredOrderIdQuery,
        reportTypeQuery(QC_REPORT_TYPES),
        { name: 'round', enum: QC_ROUNDS, description: 'default latest' },
      ],
      errors: [400, 404, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const order = locate(svc, ctx, p, false);
      const type = reportTypeOf(ctx, QC_REPORT_TYPES);
      const round = oneOf<QcRound>(ctx.query.get('round'), QC_ROUNDS, 'round', 'latest');
      if (order.qcRounds.length === 0)
        throw notFound(
          'qc_round_not_available',
          `QC has not run for this order yet (status ${order.status})`,
        );
      const record =
        round === 'latest'
          ? order.qcRounds[order.qcRounds.length - 1]
          : order.qcRounds.find((r) => r.round === round);
      if (!record) throw notFound('qc_round_not_available', `this order has no ${round} QC round`);
      sendJson(
        ctx.res,
        200,
        qcReportBody(order, record, type, (ms) => clock.iso(ms)),
        { [QC_ROUND_HEADER]: record.round },
      );
    },
  });

  router.add({
    method: 'POST',
    path: '/new-batch',
    doc: {
      summary: 'Creates a batch (study group); its id is the only way to the aggregated report',
      permission: 'write',
      body: 'json-optional',
      bodySchema: {
        type: 'object',
        properties: { products: { type: 'array', items: { type: 'string' } } },
      },
      successStatus: 201,
      errors: [400, 415, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const body = (await readJsonObject(ctx, true)) ?? {};
      const products =
        body.products === undefined
          ? [...DEFAULT_PRODUCTS]
          : (validateMetadata({ products: body.products }, false).products as string[]);
      const batchId = randomUUID();
      state.batches.set(batchId, {
        batchId,
        organizationId: p.organizationId,
        createdAt: clock.now(),
        products,
        orderIds: [],
      });
      sendJson(ctx.res, 201, { batch_id: batchId, products });
    },
  });

  router.add({
    method: 'PATCH',
    path: '/associate-order-to-batch',
    doc: {
      summary: 'Attaches an order to a batch; fails on a products-list mismatch',
      permission: 'write',
      query: [requiredOrderIdQuery, { name: 'batch_id', required: true }],
      errors: [400, 404, 409, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const order = locate(svc, ctx, p, false);
      const batchId = requireUuid(
        ctx.query.get('batch_id') ?? ctx.query.get('study_group'),
        'batch_id',
      );
      const batch = batchOf(batchId, p);
      const products = productsOf(metadataOf(order));
      if (!sameProducts(products, batch.products)) {
        throw conflict(
          'products_mismatch',
          `order products [${products.join(', ')}] differ from the batch products [${batch.products.join(', ')}]`,
        );
      }
      if (order.batchId && order.batchId !== batchId) {
        const old = state.batches.get(order.batchId);
        if (old) old.orderIds = old.orderIds.filter((id) => id !== order.orderId);
      }
      if (!batch.orderIds.includes(order.orderId)) batch.orderIds.push(order.orderId);
      order.batchId = batchId;
      sendJson(ctx.res, 200, { order_id: order.orderId, batch_id: batchId });
    },
  });

  router.add({
    method: 'GET',
    path: '/report',
    doc: {
      summary: 'Aggregated report of a batch',
      permission: 'read',
      query: [
        { name: 'study_group', required: true, description: 'batch UUIDv4' },
        reportTypeQuery(REPORT_TYPES),
      ],
      responseContent: 'document',
      errors: [400, 404, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const batchId = requireUuid(ctx.query.get('study_group'), 'study_group');
      const type = reportTypeOf(ctx, REPORT_TYPES);
      const batch = batchOf(batchId, p);
      const visible = new Set(state.visibleOrders(p).map((o) => o.orderId));
      const orders = batch.orderIds
        .filter((id) => visible.has(id))
        .map((id) => state.orders.get(id)!);
      sendReport(
        ctx.res,
        'batch-report',
        batch.batchId,
        type,
        batchDocument(batch, orders, (ms) => clock.iso(ms)),
      );
    },
  });

  router.add({
    method: 'GET',
    path: '/reports',
    doc: {
      summary: 'Reports of the organization not yet acknowledged',
      permission: 'read',
      query: [{ name: 'organizationId', required: true }, ...pageQuery],
      errors: [400, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      requireOwnOrganization(ctx, p);
      const reports = visibleReports(svc, p)
        .filter((r) => !r.acknowledged)
        .sort((a, b) => a.createdAt - b.createdAt)
        .map((r) => {
          const o = state.orders.get(r.orderId)!;
          return {
            report_id: r.reportId,
            order_id: r.orderId,
            study_uid: studyUidOf(o),
            status: o.status,
            kind: r.kind,
            report_types:
              r.kind === 'results'
                ? REPORT_TYPES
                : r.kind === 'failure'
                  ? FAILURE_REPORT_TYPES
                  : QC_REPORT_TYPES,
            created_at: clock.iso(r.createdAt),
          };
        });
      sendJson(ctx.res, 200, paginate(svc, ctx, 'reports', reports));
    },
  });
  router.add({
    method: 'POST',
    path: '/reports',
    doc: {
      summary: 'Acknowledges retrieved reports (marks them received)',
      permission: 'write',
      query: [{ name: 'organizationId', required: true }],
      body: 'json',
      bodySchema: {
        type: 'object',
        required: ['report_ids'],
        properties: { report_ids: { type: 'array', items: { type: 'string' } } },
      },
      errors: [400, 415, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      requireOwnOrganization(ctx, p);
      const body = (await readJsonObject(ctx))!;
      const ids = body.report_ids;
      if (!Array.isArray(ids) || ids.some((x) => typeof x !== 'string'))
        throw badRequest('invalid_parameter', 'report_ids must be an array of strings');
      const mine = new Map(visibleReports(svc, p).map((r) => [r.reportId, r]));
      let acknowledged = 0;
      const unknown: string[] = [];
      for (const id of ids as string[]) {
        const r = mine.get(id);
        if (!r) unknown.push(id);
        else if (!r.acknowledged) {
          r.acknowledged = true;
          acknowledged++;
        }
      }
      sendJson(ctx.res, 200, { acknowledged, unknown });
    },
  });
}
