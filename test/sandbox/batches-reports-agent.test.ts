import {
  ADMIN_B,
  MINUTE,
  USER_A1,
  WRITER_A,
  assertValidPdf,
  newOrder,
  processedOrder,
  startHarness,
  statusOf,
  type Harness,
} from './sandbox-test-kit';

async function processed(
  h: Harness,
  outcome: string,
  token?: string,
  extra: Record<string, unknown> = {},
): Promise<string> {
  return processedOrder(h, { sandbox_outcome: outcome, ...extra }, token);
}

describe('sandbox: batches, report polling and the Agent', () => {
  let h: Harness;
  let t: string;
  beforeAll(async () => {
    h = await startHarness();
    t = await h.token();
  });
  afterAll(async () => h.close());

  describe('batches', () => {
    it('creates a batch, associates orders with the same products list, refuses a mismatch, and aggregates', async () => {
      const created = await h.call('POST', '/new-batch', {
        token: t,
        json: { products: ['neuro-volumetry', 'hippocampal-atrophy'] },
      });
      expect(created.status).toBe(201);
      const batchId = created.json.batch_id as string;
      expect(batchId).toMatch(/^[0-9a-f-]{36}$/);
      const products = { products: ['hippocampal-atrophy', 'neuro-volumetry'] };
      const a = await processed(h, 'delivered', undefined, products);
      const b = await processed(h, 'failed', undefined, products);
      const mismatch = await newOrder(h, { products: ['neuro-volumetry'] });
      for (const id of [a, b]) {
        const r = await h.call('PATCH', '/associate-order-to-batch', {
          token: t,
          query: { order_id: id, batch_id: batchId },
        });
        expect(r.status).toBe(200);
        expect(r.json).toEqual({ order_id: id, batch_id: batchId });
      }
      const refused = await h.call('PATCH', '/associate-order-to-batch', {
        token: t,
        query: { order_id: mismatch, batch_id: batchId },
      });
      expect(refused.status).toBe(409);
      expect(refused.json.error).toBe('products_mismatch');
      const changeProducts = await h.call('PATCH', '/add-metadata', {
        token: t,
        query: { order_id: a },
        json: { products: ['neuro-volumetry'] },
      });
      expect(changeProducts.status).toBe(409);

      await h.sandbox.advance(MINUTE);
      const json = await h.call('GET', '/report', {
        token: t,
        query: { study_group: batchId, report_type: 'JSON' },
      });
      expect(json.status).toBe(200);
      expect(json.json).toMatchObject({
        study_group: batchId,
        summary: { orders: 2, delivered: 1 },
      });
      const orders = json.json.orders as {
        order_id: string;
        status: string;
        whole_brain_ml: number | null;
      }[];
      expect(orders.find((o) => o.order_id === a)).toMatchObject({
        status: 'DELIVERED',
        whole_brain_ml: expect.any(Number),
      });
      expect(orders.find((o) => o.order_id === b)).toMatchObject({
        status: 'FAILED',
        whole_brain_ml: null,
      });
      assertValidPdf(
        (
          await h.call('GET', '/report', {
            token: t,
            query: { study_group: batchId, report_type: 'PDF' },
          })
        ).buffer,
      );
      for (const type of ['PNG', 'XML', 'TXT']) {
        expect(
          (
            await h.call('GET', '/report', {
              token: t,
              query: { study_group: batchId, report_type: type },
            })
          ).status,
        ).toBe(200);
      }
    });

    it('defaults a batch to the default products list and answers 404 for unknown or foreign batches', async () => {
      const created = await h.call('POST', '/new-batch', { token: t });
      expect(created.status).toBe(201);
      expect(created.json.products).toEqual(['neuro-volumetry']);
      const order = await newOrder(h, {});
      expect(
        (
          await h.call('PATCH', '/associate-order-to-batch', {
            token: t,
            query: { order_id: order, batch_id: created.json.batch_id as string },
          })
        ).status,
      ).toBe(200);
      const unknown = await h.call('GET', '/report', {
        token: t,
        query: { study_group: '3b241101-e2bb-4255-8caf-4136c566a962', report_type: 'PDF' },
      });
      expect(unknown.status).toBe(404);
      const foreign = await h.call('POST', '/new-batch', {
        token: await h.token(ADMIN_B),
        json: { products: ['neuro-volumetry'] },
      });
      const r = await h.call('PATCH', '/associate-order-to-batch', {
        token: t,
        query: { order_id: order, batch_id: foreign.json.batch_id as string },
      });
      expect(r.status).toBe(404);
      expect(
        (
          await h.call('GET', '/report', {
            token: t,
            query: { study_group: 'nope', report_type: 'PDF' },
          })
        ).status,
      ).toBe(400);
      expect(
        (await h.call('POST', '/new-batch', { token: t, json: { products: ['made-up'] } })).status,
      ).toBe(400);
    });
  });

  describe('GET /reports and POST /reports', () => {
    it('lists reports not yet acknowledged, and acknowledging removes them', async () => {
      const delivered = await processed(h, 'delivered');
      const qc = await processed(h, 'qc_failed');
      const failed = await processed(h, 'preprocessing_failed');
      await h.sandbox.advance(MINUTE);
      const r = await h.call('GET', '/reports', { token: t, query: { organizationId: 'org-a' } });
      expect(r.status).toBe(200);
      const reports = r.json.reports as {
        report_id: string;
        order_id: string;
        kind: string;
        report_types: string[];
      }[];
      const mine = reports.filter((x) => [delivered, qc, failed].includes(x.order_id));
      expect(mine.map((x) => [x.order_id, x.kind]).sort()).toEqual(
        [
          [delivered, 'results'],
          [qc, 'qc'],
          [failed, 'failure'],
        ].sort(),
      );
      expect(mine.find((x) => x.kind === 'failure')!.report_types).toContain('CSV');
      const ack = await h.call('POST', '/reports', {
        token: t,
        query: { organizationId: 'org-a' },
        json: { report_ids: mine.map((x) => x.report_id).concat('unknown-id') },
      });
      expect(ack.status).toBe(200);
      expect(ack.json).toEqual({ acknowledged: 3, unknown: ['unknown-id'] });
      const after = (
        await h.call('GET', '/reports', { token: t, query: { organizationId: 'org-a' } })
      ).json.reports as { order_id: string }[];
      expect(after.filter((x) => [delivered, qc, failed].includes(x.order_id))).toEqual([]);
    });

    it("refuses another organization's id (403) and a missing organizationId (400)", async () => {
      expect(
        (await h.call('GET', '/reports', { token: t, query: { organizationId: 'org-b' } })).status,
      ).toBe(403);
      expect((await h.call('GET', '/reports', { token: t })).status).toBe(400);
      const badBody = await h.call('POST', '/reports', {
        token: t,
        query: { organizationId: 'org-a' },
        json: { report_ids: 'all' },
      });
      expect(badBody.status).toBe(400);
    });

    it("lists the whole organization's unretrieved reports to a standard user too (contract: all reports of the organization)", async () => {
      const userToken = await h.token(USER_A1);
      const own = await processed(h, 'delivered', userToken);
      const adminOrder = await processed(h, 'delivered');
      await h.sandbox.advance(MINUTE);
      const reports = (
        await h.call('GET', '/reports', { token: userToken, query: { organizationId: 'org-a' } })
      ).json.reports as { report_id: string; order_id: string }[];
      expect(reports.map((r) => r.order_id)).toEqual(expect.arrayContaining([own, adminOrder]));
      // …and may acknowledge any of them.
      const ack = await h.call('POST', '/reports', {
        token: userToken,
        query: { organizationId: 'org-a' },
        json: {
          report_ids: reports.filter((r) => r.order_id === adminOrder).map((r) => r.report_id),
        },
      });
      expect(ack.json).toMatchObject({ acknowledged: 1, unknown: [] });
    });

    it('SANDBOX_REPORTS_PER_USER: standard users see only the reports of their own orders', async () => {
      const perUser = await startHarness({ reportsPerUser: true });
      try {
        const userToken = await perUser.token(USER_A1);
        const own = await processed(perUser, 'delivered', userToken);
        const adminOrder = await processed(perUser, 'delivered');
        await perUser.sandbox.advance(MINUTE);
        const reports = (
          await perUser.call('GET', '/reports', {
            token: userToken,
            query: { organizationId: 'org-a' },
          })
        ).json.reports as { order_id: string }[];
        expect(reports.map((r) => r.order_id)).toContain(own);
        expect(reports.map((r) => r.order_id)).not.toContain(adminOrder);
        const admin = (
          await perUser.call('GET', '/reports', {
            token: await perUser.token(),
            query: { organizationId: 'org-a' },
          })
        ).json.reports as { order_id: string }[];
        expect(admin.map((r) => r.order_id)).toEqual(expect.arrayContaining([own, adminOrder]));
      } finally {
        await perUser.close();
      }
    });

    it.each(['next', 'links', 'cursor', 'page-token'] as const)(
      'SANDBOX_PAGE_SIZE with page style %s: /list-orders and /reports come in pages that together hold everything',
      async (pageStyle) => {
        const paged = await startHarness({ pageSize: 2, pageStyle });
        try {
          const token = await paged.token();
          const ids: string[] = [];
          for (let i = 0; i < 5; i++) ids.push(await processed(paged, 'qc_failed', token));
          await paged.sandbox.advance(MINUTE);
          const follow = async (path: string, key: string, query: Record<string, string>) => {
            const seen: string[] = [];
            let q: Record<string, string> = { ...query };
            let url = path;
            for (let pages = 1; ; pages++) {
              const r = await paged.call('GET', url, { token, query: q });
              expect(r.status).toBe(200);
              const items = r.json[key] as { order_id: string }[];
              expect(items.length).toBeLessThanOrEqual(2);
              seen.push(...items.map((x) => x.order_id));
              const body = r.json as Record<string, unknown>;
              if (pageStyle === 'next' && typeof body.next === 'string') {
                expect(body.next.startsWith(paged.sandbox.baseUrl)).toBe(true);
                url = body.next;
                q = {};
              } else if (pageStyle === 'links' && (body.links as { next?: string })?.next) {
                url = (body.links as { next: string }).next.replace(/^\/v1/, '');
                q = {};
              } else if (pageStyle === 'cursor' && typeof body.next_cursor === 'string') {
                q = { ...query, cursor: body.next_cursor };
              } else if (pageStyle === 'page-token' && typeof body.nextPageToken === 'string') {
                q = { ...query, pageToken: body.nextPageToken };
              } else return { seen, pages };
            }
          };
          const orders = await follow('/list-orders', 'orders', {});
          expect(orders.pages).toBe(3);
          expect(orders.seen.sort()).toEqual([...ids].sort());
          const reports = await follow('/reports', 'reports', { organizationId: 'org-a' });
          expect(reports.pages).toBe(3);
          expect(reports.seen.sort()).toEqual([...ids].sort());
          const bad = await paged.call('GET', '/list-orders', {
            token,
            query: { cursor: 'not-a-token' },
          });
          expect(bad.status).toBe(400);
        } finally {
          await paged.close();
        }
      },
    );
  });

  describe('Agent', () => {
    it('registers with a heartbeat, which returns pending QC bypass requests', async () => {
      const hb = await h.call('POST', '/agent/heartbeat', {
        token: t,
        json: { agent_id: 'agent-01' },
      });
      expect(hb.status).toBe(200);
      const id = await processed(h, 'qc_failed');
      await h.sandbox.advance(MINUTE);
      await h.call('PATCH', '/qc-bypass', {
        token: t,
        query: { order_id: id },
        json: { reason: 'clinically needed' },
      });
      const next = await h.call('POST', '/agent/heartbeat', {
        token: t,
        json: { agent_id: 'agent-01' },
      });
      const pending = next.json.pending_qc_bypass_requests as {
        order_id: string;
        reason: string;
        requested_at: string;
      }[];
      expect(pending).toEqual([
        {
          order_id: id,
          study_uid: expect.any(String),
          reason: 'clinically needed',
          requested_at: expect.any(String),
        },
      ]);
      expect((await h.call('POST', '/agent/heartbeat', { token: t, json: {} })).status).toBe(400);
      await h.sandbox.advance(MINUTE);
      const later = await h.call('POST', '/agent/heartbeat', {
        token: t,
        json: { agent_id: 'agent-01' },
      });
      expect(later.json.pending_qc_bypass_requests).toEqual([]);
    });

    it('validates QC and failure reports, and refuses to replace a QC report while its review is open', async () => {
      await h.call('POST', '/agent/heartbeat', { token: t, json: { agent_id: 'agent-02' } });
      const qcOrder = await processed(h, 'qc_failed');
      const failedOrder = await processed(h, 'failed');
      const running = await newOrder(h);
      await h.sandbox.advance(MINUTE);
      const goodQc = {
        order_id: qcOrder,
        kind: 'qc',
        round: 'original',
        content: {
          verdict: 'failed',
          checks: [{ name: 'motion', result: 'fail', value: '2.1 mm' }],
          note: 'site QC',
        },
      };
      const r = await h.call('POST', '/agent/reports', {
        token: t,
        json: {
          agent_id: 'agent-02',
          reports: [
            goodQc,
            {
              order_id: failedOrder,
              kind: 'failure',
              content: { reason: 'site-side failure detail' },
            },
            { order_id: running, kind: 'failure', content: { reason: 'x' } },
            { order_id: qcOrder, kind: 'qc', content: { checks: [] } },
            {
              order_id: qcOrder,
              kind: 'qc',
              round: 'corrected',
              content: { verdict: 'passed', checks: [] },
            },
            { order_id: 'nope', kind: 'qc', content: {} },
            { order_id: failedOrder, kind: 'summary', content: {} },
          ],
        },
      });
      expect(r.status).toBe(200);
      expect(r.json.accepted).toBe(2);
      const rejected = r.json.rejected as { order_id: string; reason: string }[];
      expect(rejected).toHaveLength(5);
      expect(rejected[0]).toEqual({
        order_id: running,
        reason: expect.stringMatching(/only FAILED or PREPROCESSING_FAILED/),
      });
      const qc = await h.call('GET', '/qc-report', {
        token: t,
        query: { order_id: qcOrder, report_type: 'results' },
      });
      expect(qc.json).toMatchObject({ source: 'agent', note: 'site QC', agent_id: 'agent-02' });
      const failure = await h.call('GET', '/failure-report', {
        token: t,
        query: { order_id: failedOrder, report_type: 'JSON' },
      });
      expect(failure.json.agent_report).toMatchObject({ reason: 'site-side failure detail' });

      await h.call('PATCH', '/qc-bypass', { token: t, query: { order_id: qcOrder } });
      const whileOpen = await h.call('POST', '/agent/reports', {
        token: t,
        json: { agent_id: 'agent-02', reports: [goodQc] },
      });
      expect(whileOpen.json.accepted).toBe(0);
      expect((whileOpen.json.rejected as { reason: string }[])[0].reason).toMatch(
        /review of this order is open/,
      );
    });

    it('refuses an unregistered Agent (403), a malformed body (400) and a token without write permission (403)', async () => {
      const unregistered = await h.call('POST', '/agent/reports', {
        token: t,
        json: { agent_id: 'ghost', reports: [{}] },
      });
      expect(unregistered.status).toBe(403);
      expect(unregistered.json.error).toBe('agent_not_registered');
      await h.call('POST', '/agent/heartbeat', { token: t, json: { agent_id: 'agent-03' } });
      expect(
        (
          await h.call('POST', '/agent/reports', {
            token: t,
            json: { agent_id: 'agent-03', reports: [] },
          })
        ).status,
      ).toBe(400);
      expect(
        (
          await h.call('POST', '/agent/reports', {
            token: t,
            body: '{',
            headers: { 'content-type': 'application/json' },
          })
        ).status,
      ).toBe(400);
      const other = await h.call('POST', '/agent/heartbeat', {
        token: await h.token(ADMIN_B),
        json: { agent_id: 'agent-03' },
      });
      expect(other.status).toBe(200);
      expect((await h.call('GET', '/products', { token: await h.token(WRITER_A) })).status).toBe(
        403,
      );
    });

    it('keeps Agent-synchronized orders of other organizations out of reach', async () => {
      const foreign = await processed(h, 'failed', await h.token(ADMIN_B));
      await h.sandbox.advance(MINUTE);
      expect(await statusOf(h, foreign, await h.token(ADMIN_B))).toBe('FAILED');
      await h.call('POST', '/agent/heartbeat', { token: t, json: { agent_id: 'agent-04' } });
      const r = await h.call('POST', '/agent/reports', {
        token: t,
        json: {
          agent_id: 'agent-04',
          reports: [{ order_id: foreign, kind: 'failure', content: { reason: 'x' } }],
        },
      });
      expect(r.json).toEqual({
        accepted: 0,
        rejected: [{ order_id: foreign, reason: 'unknown order' }],
      });
    });
  });
});
