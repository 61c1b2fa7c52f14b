import { readJsonObject, type RequestContext, sendJson, type Router } from './http-router';
import type { Principal } from './token-store';
import {
  DEFAULT_PRODUCTS,
  SANDBOX_PRODUCTS,
  sameProducts,
  validateMetadata,
  type Metadata,
} from './metadata-rules';
import { STATUS_DESCRIPTIONS } from './order-lifecycle';
import { metadataOf, orderStatusOf, studyUidOf, type SandboxOrder } from './sandbox-state';
import { badRequest, conflict } from './sandbox.error';
import {
  ERR_AUTH,
  locate,
  statusBody,
  applyMetadata,
  createOrder,
  orderIdQuery,
  pageQuery,
  paginate,
  abortOpenUploadsOf,
  requiredOrderIdQuery,
  studyUidQuery,
} from './route-helpers';
import type { SandboxServices } from './sandbox-services';

/** Orders: creation (current and legacy), metadata, status, listing, QC bypass, cancel, products, activity. */
export function registerOrderRoutes(router: Router, svc: SandboxServices): void {
  const { state, lifecycle, clock } = svc;
  const metadataBody = (order: SandboxOrder) => ({
    order_id: order.orderId,
    metadata: metadataOf(order),
  });
  /** Both forms of /new-order: the metadata validated, the order created, 201 with its id. */
  const created = (ctx: RequestContext, p: Principal, raw: Record<string, unknown>) => {
    const order = createOrder(svc, p, validateMetadata(raw, false) as Metadata);
    sendJson(ctx.res, 201, { order_id: order.orderId });
  };
  router.add({
    method: 'POST',
    path: '/new-order',
    doc: {
      summary: 'Creates an order from a JSON metadata object',
      permission: 'write',
      body: 'json',
      successStatus: 201,
      errors: [400, 413, 415, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      created(ctx, p, (await readJsonObject(ctx))!);
    },
  });
  router.add({
    method: 'GET',
    path: '/new-order',
    doc: {
      summary: 'Legacy order creation: metadata as query parameters (products comma-separated)',
      permission: 'write',
      legacy: true,
      successStatus: 201,
      errors: [400, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const raw: Record<string, unknown> = {};
      for (const [k, v] of ctx.query)
        raw[k] =
          k === 'products'
            ? v
                .split(',')
                .map((x) => x.trim())
                .filter(Boolean)
            : v;
      created(ctx, p, raw);
    },
  });

  router.add({
    method: 'PATCH',
    path: '/add-metadata',
    doc: {
      summary: 'Adds or overwrites API metadata (null removes a key)',
      permission: 'write',
      query: [orderIdQuery, studyUidQuery],
      body: 'json',
      errors: [400, 404, 409, 415, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const order = locate(svc, ctx, p, true);
      const patch = validateMetadata((await readJsonObject(ctx))!, true);
      if (lifecycle.isTerminal(order))
        throw conflict(
          'order_terminal',
          `order is ${order.status}; its metadata can no longer change`,
        );
      if ('products' in patch && order.batchId) {
        const batch = state.batches.get(order.batchId)!;
        const next = patch.products === null ? DEFAULT_PRODUCTS : (patch.products as string[]);
        if (!sameProducts(next, batch.products)) {
          throw conflict(
            'products_mismatch',
            `order is in batch ${batch.batchId}, whose products are [${batch.products.join(', ')}]`,
          );
        }
      }
      applyMetadata(order, patch);
      order.updatedAt = clock.now();
      sendJson(ctx.res, 200, metadataBody(order));
    },
  });
  /** The read-only views of one order, addressed by order_id or study_uid. */
  const orderView = (
    path: string,
    summary: string,
    body: (order: SandboxOrder) => Record<string, unknown>,
  ) =>
    router.add({
      method: 'GET',
      path,
      doc: {
        summary,
        permission: 'read',
        query: [orderIdQuery, studyUidQuery],
        errors: [400, 404, ...ERR_AUTH],
      },
      handle: async (ctx, p) => sendJson(ctx.res, 200, body(locate(svc, ctx, p, true))),
    });
  orderView(
    '/metadata',
    'All current metadata (API values over DICOM tags and sidecar)',
    metadataBody,
  );
  orderView('/status', 'Current status of an order', (order) => statusBody(svc, order));

  router.add({
    method: 'GET',
    path: '/list-orders',
    doc: {
      summary:
        "Active orders of the caller's profile (own orders; organization admins: the organization's)",
      permission: 'read',
      query: pageQuery,
      errors: [400, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const orders = state
        .visibleOrders(p)
        .filter((o) => !lifecycle.isTerminal(o))
        .sort((a, b) => a.createdAt - b.createdAt || a.seq - b.seq)
        .map((o) => ({
          order_id: o.orderId,
          study_uid: studyUidOf(o),
          status: o.status,
          created_at: clock.iso(o.createdAt),
          updated_at: clock.iso(o.updatedAt),
          batch_id: o.batchId,
        }));
      sendJson(ctx.res, 200, paginate(svc, ctx, 'orders', orders));
    },
  });

  router.add({
    method: 'PATCH',
    path: '/qc-bypass',
    doc: {
      summary: 'Records (or withdraws) a QC bypass request',
      permission: 'write',
      query: [requiredOrderIdQuery],
      body: 'json-optional',
      bodySchema: {
        type: 'object',
        properties: { reason: { type: 'string', maxLength: 1000 }, withdraw: { type: 'boolean' } },
      },
      // 403 also when manual review restrictions forbid the bypass (qc_bypass_restricted).
      errors: [400, 404, 409, 415, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const order = locate(svc, ctx, p, false);
      const body = (await readJsonObject(ctx, true)) ?? {};
      const reason = body.reason;
      if (
        reason !== undefined &&
        reason !== null &&
        (typeof reason !== 'string' || reason.length > 1000)
      ) {
        throw badRequest('invalid_parameter', 'reason must be a string of at most 1000 characters');
      }
      if (body.withdraw !== undefined && typeof body.withdraw !== 'boolean')
        throw badRequest('invalid_parameter', 'withdraw must be a boolean');
      if (body.withdraw === true) lifecycle.withdrawBypass(order);
      else lifecycle.requestBypass(order, typeof reason === 'string' ? reason : null, p.clientId);
      sendJson(ctx.res, 200, {
        order_id: order.orderId,
        bypass_requested: order.bypass?.state === 'pending',
        status: order.status,
      });
    },
  });

  router.add({
    method: 'PATCH',
    path: '/cancel-order',
    doc: {
      summary: 'Cancels an order in progress; permanent',
      permission: 'write',
      query: [requiredOrderIdQuery],
      errors: [400, 404, 409, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const order = locate(svc, ctx, p, false);
      lifecycle.cancel(order);
      // Cancel is permanent: open multipart uploads of the order end too (freeing their slots).
      await abortOpenUploadsOf(svc, order.orderId);
      sendJson(ctx.res, 200, orderStatusOf(order));
    },
  });

  router.add({
    method: 'GET',
    path: '/products',
    doc: {
      summary: 'Products with UDI and fda_desc (null when unassigned)',
      permission: 'read',
      errors: ERR_AUTH,
    },
    handle: async (ctx) => sendJson(ctx.res, 200, { products: SANDBOX_PRODUCTS }),
  });

  router.add({
    method: 'GET',
    path: '/recent-activity',
    doc: { summary: 'Recent status changes, camelCase keys', permission: 'read', errors: ERR_AUTH },
    handle: async (ctx, p) => {
      const activity = state
        .visibleOrders(p)
        .flatMap((o) => o.history.map((h) => ({ o, h })))
        .sort((a, b) => b.h.at - a.h.at || b.h.seq - a.h.seq)
        .slice(0, 200)
        .map(({ o, h }) => ({
          orderId: o.orderId,
          studyUid: studyUidOf(o),
          status: h.status,
          statusDesc: STATUS_DESCRIPTIONS[h.status] ?? 'status not described',
          failureReason: h.failureReason,
          timestamp: clock.iso(h.at),
        }));
      sendJson(ctx.res, 200, { activity });
    },
  });
}
