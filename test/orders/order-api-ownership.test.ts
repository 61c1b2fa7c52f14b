import { createHash } from 'node:crypto';
import { MllpClient } from '../../src/hl7';
import { TEST_TOKENS } from '../helpers/adapter';
import { startFhirHarness, type FhirHarness } from '../helpers/fhir-harness';
import { chestCtRequest, type Json } from '../helpers/fhir-fixtures';
import { ackSummary, hl7Fixture } from '../helpers/hl7-fixtures';
import { waitFor } from '../e2e/e2e-support';

jest.setTimeout(120_000);

/** A second RIS of the site: its own sender token, its own orders. */
const OTHER_SENDER = 'other-ris-sender-token-0123456789ab';
const UNKNOWN = '01a1fd62-0000-7000-8000-000000000000';

/** The audit actor of a token (`src/auth/bearer-auth.guard.ts`). */
const actorOf = (role: string, token: string) =>
  `${role}#${createHash('sha256').update(token).digest('hex').slice(0, 8)}`;

/**
 * `POST /api/orders/{id}/cancel` and `/qc-bypass` (role sender) acted on any order by id,
 * whoever submitted it: one RIS's token cancelled, or had analysed despite a QC rejection,
 * another system's orders, while the FHIR door kept each sender to its own (docs/fhir.md).
 * A sender token now acts only on the orders it submitted; another's order is answered as an
 * unknown one (404, the same problem), and the attempt is on that order's timeline. Orders
 * over HL7 carry no token (MLLP has none): only admin acts on them through the API. Real
 * adapter, real HTTP and MLLP, real PostgreSQL.
 */
describe('the order API acts only on the sender token’s own orders', () => {
  let h: FhirHarness;
  let mllp: MllpClient;

  beforeAll(async () => {
    h = await startFhirHarness({
      API_TOKENS: [
        ...Object.entries(TEST_TOKENS).map(([role, token]) => `${role}:${token}`),
        `sender:${OTHER_SENDER}`,
      ].join(','),
    });
    mllp = new MllpClient({
      host: '127.0.0.1',
      port: h.adapter.mllpPort,
      responseTimeoutMs: 30_000,
    });
  });
  afterAll(async () => {
    await mllp?.close();
    await h?.close();
  });

  const createFhir = async (placer: string, token: string): Promise<string> => {
    const res = await fetch(`${h.adapter.httpUrl}/fhir/ServiceRequest`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/fhir+json' },
      body: JSON.stringify(chestCtRequest(placer)),
    });
    expect(res.status).toBe(201);
    return orderUnder(placer);
  };
  const orderUnder = async (placer: string): Promise<string> =>
    (
      await h.db.query<{ id: string }>(`SELECT id FROM orders WHERE placer_order_number = $1`, [
        placer,
      ])
    ).rows[0]!.id;
  const api = async (path: string, body: Json, token: string) => {
    const res = await fetch(`${h.adapter.httpUrl}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return {
      status: res.status,
      type: res.headers.get('content-type'),
      body: (await res.json()) as Record<string, unknown>,
    };
  };
  const cancelling = async (id: string) =>
    (
      await h.db.query<{ cancel_requested_at: Date | null; cancel_reason: string | null }>(
        `SELECT cancel_requested_at, cancel_reason FROM orders WHERE id = $1`,
        [id],
      )
    ).rows[0]!;
  const events = async (id: string, kind: string) =>
    (
      await h.db.query<{ severity: string; actor: string; summary: string; detail: Json }>(
        `SELECT severity, actor, summary, detail FROM audit_events WHERE order_id = $1 AND kind = $2 ORDER BY id`,
        [id, kind],
      )
    ).rows;
  /** What a 404 says, but for the path it names and the request's correlation id. */
  const asUnknown = (body: Record<string, unknown>) => {
    const { instance: _instance, correlationId: _correlationId, ...rest } = body;
    return rest;
  };

  it('another sender’s order: cancel and QC bypass are 404 as for an unknown order, nothing changed, the attempt on its timeline', async () => {
    const mine = await createFhir('PLC-OWN-A1', TEST_TOKENS.sender);
    const unknown = await api(`/api/orders/${UNKNOWN}/cancel`, { reason: 'x' }, OTHER_SENDER);
    expect(unknown.status).toBe(404);

    const cancel = await api(
      `/api/orders/${mine}/cancel`,
      { reason: 'wrong patient' },
      OTHER_SENDER,
    );
    expect(cancel.status).toBe(404);
    expect(cancel.type).toMatch(/application\/problem\+json/);
    expect(asUnknown(cancel.body)).toEqual(asUnknown(unknown.body));
    expect(await cancelling(mine)).toEqual({ cancel_requested_at: null, cancel_reason: null });
    expect(await events(mine, 'order.cancel-requested')).toEqual([]);

    const unknownBypass = await api(
      `/api/orders/${UNKNOWN}/qc-bypass`,
      { reason: 'x' },
      OTHER_SENDER,
    );
    for (const body of [{ reason: 'artefacts acceptable' }, { withdraw: true }]) {
      const bypass = await api(`/api/orders/${mine}/qc-bypass`, body, OTHER_SENDER);
      // before: 409 not_on_qc_hold naming the order's state (and, on hold, sent upstream)
      expect(bypass.status).toBe(404);
      expect(asUnknown(bypass.body)).toEqual(asUnknown(unknownBypass.body));
    }

    // The attempt is on the order's timeline, written after the answer (awaited, it made the
    // 404 of an existing order slower than an unknown id's) and once per token and action:
    // the token asking again and again does not fill the timeline.
    const other = actorOf('sender', OTHER_SENDER);
    for (let i = 0; i < 5; i++) {
      expect(
        (await api(`/api/orders/${mine}/cancel`, { reason: 'again' }, OTHER_SENDER)).status,
      ).toBe(404);
    }
    const refusals = async () => [
      ...(await events(mine, 'order.cancel-refused')),
      ...(await events(mine, 'order.change-refused')),
    ];
    await waitFor('the refusals on the timeline', async () => (await refusals()).length >= 3);
    await new Promise((r) => setTimeout(r, 500));
    expect(await events(mine, 'order.cancel-refused')).toEqual([
      {
        severity: 'warning',
        actor: other,
        summary: `cancel refused: ${other} did not submit this order (answered as unknown, 404; recorded once per token and action)`,
        detail: {
          via: 'api',
          action: 'cancel',
          reason: 'not-submitter',
          attempt: `${other} cancel`,
        },
      },
    ]);
    expect(
      (await events(mine, 'order.change-refused')).map((e) => [e.actor, e.detail.action]),
    ).toEqual([
      [other, 'qc-bypass'],
      [other, 'qc-bypass-withdraw'],
    ]);

    // its own sender still acts on it, and so does admin on any
    const bypass = await api(`/api/orders/${mine}/qc-bypass`, { reason: 'x' }, TEST_TOKENS.sender);
    expect(bypass).toMatchObject({ status: 409, body: { code: 'not_on_qc_hold' } });
    const own = await api(`/api/orders/${mine}/cancel`, { reason: 'declined' }, TEST_TOKENS.sender);
    expect(own.status).toBe(202);
    expect((await cancelling(mine)).cancel_reason).toBe('API: declined');
    const theirs = await createFhir('PLC-OWN-B1', OTHER_SENDER);
    expect(
      (await api(`/api/orders/${theirs}/cancel`, { reason: 'ops' }, TEST_TOKENS.admin)).status,
    ).toBe(202);
  });

  it('an order over HL7 (no token): only admin cancels or bypasses it through the API', async () => {
    const raw = hl7Fixture('orm-o01-v231-ihe-swf-zds')
      .toString('latin1')
      .split('MSGID20240318144217')
      .join('OWN-HL7-1')
      .split('PLC-100234')
      .join('PLC-OWN-HL7');
    expect(ackSummary(await mllp.send(Buffer.from(raw, 'latin1'))).code).toBe('AA');
    const id = await orderUnder('PLC-OWN-HL7');
    for (const token of [TEST_TOKENS.sender, OTHER_SENDER]) {
      expect((await api(`/api/orders/${id}/cancel`, { reason: 'x' }, token)).status).toBe(404);
      expect((await api(`/api/orders/${id}/qc-bypass`, { reason: 'x' }, token)).status).toBe(404);
    }
    expect((await cancelling(id)).cancel_requested_at).toBeNull();
    expect(
      (await api(`/api/orders/${id}/qc-bypass`, { reason: 'x' }, TEST_TOKENS.admin)).body,
    ).toMatchObject({ code: 'not_on_qc_hold' });
    expect(
      (await api(`/api/orders/${id}/cancel`, { reason: 'ops' }, TEST_TOKENS.admin)).status,
    ).toBe(202);
    expect(await events(id, 'order.cancel-requested')).toEqual([
      expect.objectContaining({ actor: actorOf('admin', TEST_TOKENS.admin) }),
    ]);
  });
});
