import { readJsonObject, sendJson, type Router } from './http-router';
import { studyUidOf } from './sandbox-state';
import { SandboxError, badRequest } from './sandbox.error';
import { UUID_V4, ERR_AUTH } from './route-helpers';
import type { SandboxServices } from './sandbox-services';

/** The Agent: heartbeat (path of our choosing, docs/upstream-assumptions.md) and report synchronization. */
export function registerAgentRoutes(router: Router, svc: SandboxServices): void {
  const { state, clock } = svc;
  const agentId = (value: unknown): string => {
    if (typeof value !== 'string' || !/^[A-Za-z0-9._-]{1,64}$/.test(value))
      throw badRequest(
        'invalid_parameter',
        'agent_id must be 1-64 characters of letters, digits, ".", "_" or "-"',
      );
    return value;
  };

  router.add({
    method: 'POST',
    path: '/agent/heartbeat',
    doc: {
      summary:
        'Agent heartbeat (registers the Agent); returns pending QC bypass requests to apply locally',
      permission: 'write',
      body: 'json',
      bodySchema: {
        type: 'object',
        required: ['agent_id'],
        properties: { agent_id: { type: 'string' } },
      },
      errors: [400, 415, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const id = agentId((await readJsonObject(ctx))!.agent_id);
      state.agents.set(`${p.organizationId}/${id}`, {
        agentId: id,
        organizationId: p.organizationId,
        lastHeartbeatAt: clock.now(),
      });
      const pending = state
        .visibleOrders(p)
        .filter((o) => o.bypass?.state === 'pending')
        .map((o) => ({
          order_id: o.orderId,
          study_uid: studyUidOf(o),
          reason: o.bypass!.reason,
          requested_at: clock.iso(o.bypass!.requestedAt),
        }));
      sendJson(ctx.res, 200, {
        agent_id: id,
        server_time: clock.iso(),
        pending_qc_bypass_requests: pending,
      });
    },
  });

  router.add({
    method: 'POST',
    path: '/agent/reports',
    doc: {
      summary: 'Synchronizes QC and failure reports from a registered Agent',
      permission: 'write',
      body: 'json',
      bodySchema: {
        type: 'object',
        required: ['agent_id', 'reports'],
        properties: {
          agent_id: { type: 'string' },
          reports: {
            type: 'array',
            items: {
              type: 'object',
              required: ['order_id', 'kind', 'content'],
              properties: {
                order_id: { type: 'string' },
                kind: { enum: ['qc', 'failure'] },
                round: { enum: ['original', 'corrected'] },
                content: { type: 'object' },
              },
            },
          },
        },
      },
      errors: [400, 403, 415, ...ERR_AUTH],
    },
    handle: async (ctx, p) => {
      const body = (await readJsonObject(ctx))!;
      const id = agentId(body.agent_id);
      if (!state.agents.has(`${p.organizationId}/${id}`)) {
        throw new SandboxError(
          403,
          'agent_not_registered',
          `agent "${id}" is not registered; send POST /agent/heartbeat first`,
        );
      }
      if (!Array.isArray(body.reports) || body.reports.length === 0)
        throw badRequest('invalid_parameter', 'reports must be a non-empty array');
      if (body.reports.length > 1000)
        throw badRequest('invalid_parameter', 'at most 1000 reports per call');
      let accepted = 0;
      const rejected: { order_id: unknown; reason: string }[] = [];
      for (const item of body.reports as unknown[]) {
        const r = (typeof item === 'object' && item !== null ? item : {}) as Record<
          string,
          unknown
        >;
        const reject = (reason: string): void => {
          rejected.push({ order_id: r.order_id ?? null, reason });
        };
        if (typeof r.order_id !== 'string' || !UUID_V4.test(r.order_id)) {
          reject('order_id must be a UUIDv4');
          continue;
        }
        const order = state.orders.get(r.order_id.toLowerCase());
        if (!order || order.organizationId !== p.organizationId) {
          reject('unknown order');
          continue;
        }
        if (typeof r.content !== 'object' || r.content === null || Array.isArray(r.content)) {
          reject('content must be a JSON object');
          continue;
        }
        const content = r.content as Record<string, unknown>;
        if (r.kind === 'qc') {
          const round = r.round ?? 'original';
          if (round !== 'original' && round !== 'corrected') {
            reject('round must be original or corrected');
            continue;
          }
          if (
            !['passed', 'failed', 'bypassed'].includes(content.verdict as string) ||
            !Array.isArray(content.checks)
          ) {
            reject('a QC report needs verdict (passed, failed or bypassed) and a checks array');
            continue;
          }
          const record = order.qcRounds.find((q) => q.round === round);
          if (!record) {
            reject(`the order has no ${round} QC round to synchronize`);
            continue;
          }
          if (order.bypass?.state === 'pending') {
            reject(
              'the QC review of this order is open (bypass request pending); its QC report cannot be replaced',
            );
            continue;
          }
          record.agentContent = {
            verdict: content.verdict,
            checks: content.checks,
            note: typeof content.note === 'string' ? content.note : null,
            agent_id: id,
          };
          accepted++;
        } else if (r.kind === 'failure') {
          if (!order.failure) {
            reject(
              `order is ${order.status}; only FAILED or PREPROCESSING_FAILED orders have failure reports`,
            );
            continue;
          }
          if (typeof content.reason !== 'string' || content.reason === '') {
            reject('a failure report needs a non-empty reason');
            continue;
          }
          order.agentFailure = { ...content, agent_id: id };
          accepted++;
        } else {
          reject('kind must be qc or failure');
        }
      }
      sendJson(ctx.res, 200, { accepted, rejected });
    },
  });
}
