import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ImagingClientError } from '../../src/imaging-client';
import { MAX_LIST_PAGES } from '../../src/imaging-client/list-pages';
import { PAGE_STYLES } from '../../src/sandbox/sandbox-options';
import { createMrBrainSeries, generateUid } from '../helpers/dicom-factory';
import { buildClient, startTestSandbox } from './sandbox-harness';
import { json, startScriptedUpstream, tokenAnswer } from './scripted-upstream';

/**
 * `/list-orders` and `/reports` are one answer in the contract; should they ever page, the
 * client reads every page (bounded, within IMAGING_BASE_URL). The sandbox pages on request
 * (SANDBOX_PAGE_SIZE, SANDBOX_PAGE_STYLE); a scripted peer plays what the sandbox never does.
 */
describe('list answers in pages', () => {
  it.each(PAGE_STYLES)(
    'sandbox paging style %s: listOrders, the duplicate lookup and pollReports see every entry',
    async (pageStyle) => {
      const peer = await startTestSandbox({ pageSize: 2, pageStyle });
      const c = buildClient(peer.sandbox.baseUrl);
      try {
        const created: string[] = [];
        for (let i = 0; i < 7; i++) {
          created.push(
            (
              await c.client.createOrder(
                { study_uid: generateUid() },
                { correlationId: randomUUID() },
              )
            ).orderId,
          );
        }
        // The order the lookup must find sits on the last page.
        const correlationId = randomUUID();
        const last = await c.client.createOrder({ study_uid: generateUid() }, { correlationId });
        const listed = await c.client.listOrders();
        expect(listed.map((o) => o.orderId).sort()).toEqual([...created, last.orderId].sort());
        const pages = c.records.filter((r) => r.operation === 'list-orders');
        expect(pages).toHaveLength(4); // 8 orders, 2 a page
        const fresh = buildClient(peer.sandbox.baseUrl); // knows no correlation ids yet
        try {
          expect(await fresh.client.findOrderByCorrelationId(correlationId)).toBe(last.orderId);
        } finally {
          await fresh.close();
        }
        expect(await c.client.pollReports()).toEqual([]);
      } finally {
        await c.close();
        await peer.close();
      }
    },
  );

  it('follows next links within IMAGING_BASE_URL only, reads at most MAX_LIST_PAGES pages, and refuses a loop', async () => {
    let mode: 'foreign' | 'endless' | 'loop' | 'relative' = 'foreign';
    const upstream = await startScriptedUpstream((req, res) => {
      if (req.path === '/auth/token') return tokenAnswer(res);
      const n = Number(req.query.get('p') ?? '1');
      const entry = { order_id: `o-${n}`, status: 'QUEUED' };
      switch (mode) {
        case 'foreign':
          return json(res, 200, { orders: [entry], next: 'http://203.0.113.9/v1/list-orders?p=2' });
        case 'endless':
          return json(res, 200, { orders: [entry], links: { next: `/v1/list-orders?p=${n + 1}` } });
        case 'loop':
          return json(res, 200, { orders: [entry], next: '?p=1' });
        case 'relative':
          return json(
            res,
            200,
            n < 3
              ? { orders: [entry], next_page: `?p=${n + 1}` }
              : { orders: [entry], has_more: false, next: '?p=9' },
          );
      }
    });
    const c = buildClient(upstream.baseUrl, { retry: { maxAttempts: 1 } });
    try {
      const foreign = (await c.client.listOrders().catch((e: unknown) => e)) as ImagingClientError;
      expect(foreign).toBeInstanceOf(ImagingClientError);
      expect(foreign.code).toBe('invalid_response');
      expect(foreign.message).toMatch(/within IMAGING_BASE_URL/);
      expect(upstream.seen.filter((r) => r.path === '/list-orders')).toHaveLength(1);

      mode = 'endless';
      const endless = (await c.client.listOrders().catch((e: unknown) => e)) as ImagingClientError;
      expect(endless.code).toBe('invalid_response');
      expect(endless.message).toMatch(new RegExp(`more than ${MAX_LIST_PAGES} pages`));
      expect(upstream.seen.filter((r) => r.path === '/list-orders')).toHaveLength(
        1 + MAX_LIST_PAGES,
      );

      mode = 'loop';
      const loop = (await c.client.listOrders().catch((e: unknown) => e)) as ImagingClientError;
      expect(loop.message).toMatch(/repeats a page/);

      mode = 'relative';
      expect((await c.client.listOrders()).map((o) => o.orderId)).toEqual(['o-1', 'o-2', 'o-3']);
    } finally {
      await c.close();
      await upstream.close();
    }
  });

  it('an unknown status keeps the other orders (listOrders, duplicate lookup) and is named apart', async () => {
    const peer = await startTestSandbox({ clock: 'manual', timeScale: 1 });
    const c = buildClient(peer.sandbox.baseUrl);
    const dir = await mkdtemp(join(tmpdir(), 'unknown-status-'));
    try {
      const correlationId = randomUUID();
      const pending = await c.client.createOrder({ study_uid: generateUid() }, { correlationId });
      const odd = await c.client.createOrder(
        { sandbox_outcome: 'unknown_status' },
        { correlationId: randomUUID() },
      );
      const file = join(dir, 'study.dcm');
      await writeFile(file, createMrBrainSeries({ series: { slices: 1 } })[0]!.bytes);
      await c.uploader.upload(odd.orderId, file);
      // RECEIVED → QUEUED → ELIGIBILITY_CHECK_RUNNING → a status the contract does not name.
      for (let i = 0; i < 5; i++) await peer.sandbox.advance(1_000);
      expect(peer.sandbox.state.orders.get(odd.orderId)!.status).toBe('VENDOR_REVIEW_HOLD');

      const active = await c.client.listActiveOrders();
      expect(active.orders.map((o) => o.orderId)).toContain(pending.orderId);
      expect(active.orders.map((o) => o.orderId)).not.toContain(odd.orderId);
      expect(active.unknownStatus).toEqual([
        { orderId: odd.orderId, status: 'VENDOR_REVIEW_HOLD' },
      ]);
      const fresh = buildClient(peer.sandbox.baseUrl);
      try {
        expect(await fresh.client.findOrderByCorrelationId(correlationId)).toBe(pending.orderId);
      } finally {
        await fresh.close();
      }
    } finally {
      await c.close();
      await peer.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
