import { Client } from 'pg';
import { MllpClient } from '../../src/hl7';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';

jest.setTimeout(60_000);

const HTML = 'text/html';
/** Markup a hostile sender puts in fields the audit page shows (names, numbers, free text). */
const PAYLOADS = [
  '<script>alert(1)</script>',
  '"><img src=x onerror=alert(2)>',
  "'><svg onload=alert(3)>",
  'javascript:alert(4)',
];

/**
 * What a sender wrote is shown as text on the audit page, never as markup: every field that
 * reaches a page (sender, control id, placer/accession numbers, procedure, notes, quirks,
 * the raw message, the lineage) is escaped, masked or revealed, and the page allows no inline
 * script (CSP with a nonce, no 'unsafe-inline').
 */
describe('hostile: markup in HL7 values reaches the audit page as text', () => {
  let adapter: TestAdapter;
  let db: Client;

  beforeAll(async () => {
    adapter = await startTestAdapter({ JOBS_ENABLED: 'false' });
    db = new Client({ connectionString: adapter.db.url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await adapter?.close();
  });

  const page = async (path: string, init: RequestInit = {}) => {
    const res = await fetch(`${adapter.httpUrl}${path}`, {
      ...init,
      headers: { authorization: `Bearer ${TEST_TOKENS.admin}`, accept: HTML, ...init.headers },
    });
    return {
      status: res.status,
      csp: res.headers.get('content-security-policy') ?? '',
      html: await res.text(),
    };
  };

  const markupFree = (html: string) => {
    // an event handler can only run inside a real tag: none of the payloads' tags may be one
    for (const tag of [/<script(?![^>]*\bnonce=)/i, /<img\b/i, /<svg\b/i, /<b>/i]) {
      expect(html).not.toMatch(tag);
    }
    expect(html).not.toMatch(/href="javascript:/i);
  };

  it('a message whose every text field holds markup: list, message and order pages show it escaped', async () => {
    const [p1, p2, p3, p4] = PAYLOADS.map((p) => p.replace(/\|/g, ''));
    const control = `X<b>1`;
    const message = [
      `MSH|^~\\&|RIS${p2}|HOSP|AI|HOSP|20240318101500||ORM^O01|${control}|P|2.5.1`,
      `PID|1||PAT-1${p3}^^^HOSP^MR||${p1}^${p2}||19560402|M`,
      `ORC|NW|PL-${p2}^RIS|||||||20240318101500|||1234^${p1}^A`,
      `OBR|1|PL-${p2}^RIS||24627-2^${p1}^LN||20240318101500||||||${p4}|||1234^DOC^A||ACC-${p3}||||||CT`,
      `NTE|1||${p1} ${p2}`,
      `ZZZ|${p1}`,
    ].join('\r');
    const client = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 10_000,
    });
    try {
      const ack = (await client.send(Buffer.from(message, 'utf8'))).toString('utf8');
      expect(ack).toMatch(/\rMSA\|A[AE]\|/);
    } finally {
      await client.close();
    }
    const stored = (
      await db.query<{ id: string }>(
        `SELECT id FROM inbound_messages ORDER BY received_at DESC LIMIT 1`,
      )
    ).rows[0]!;
    const orders = (await db.query<{ id: string }>(`SELECT id FROM orders`)).rows;

    expect(orders).toHaveLength(1);
    // an admin's reveal shows the values unmasked: still as text
    const reveal = (path: string) =>
      page(path, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ reveal: 'true', reason: 'injection test' }).toString(),
      });
    const pages = [
      await reveal(`/audit/messages/${stored.id}`),
      await reveal(`/audit/orders/${orders[0]!.id}`),
      await page('/audit/messages'),
      await page(`/audit/messages/${stored.id}`),
      ...(await Promise.all(orders.map((o) => page(`/audit/orders/${o.id}`)))),
      await page('/audit/orders'),
      await page(`/audit/messages?msh10=${encodeURIComponent(control)}`),
    ];
    for (const p of pages) {
      expect(p.status).toBe(200);
      markupFree(p.html);
      expect(p.csp).toMatch(/script-src[^;]*'nonce-|default-src 'none'|script-src 'none'/);
      expect(p.csp).not.toMatch(/'unsafe-inline'/);
    }
    // shown, as text: the control id and the sender (escaped, not dropped)
    expect(pages[3]!.html).toContain('X&lt;b&gt;1');
    expect(pages[2]!.html).toContain('RIS&quot;&gt;&lt;img src=x onerror=alert(2)&gt;');
    // revealed: the patient's name, as text
    expect(pages[1]!.html).toContain('&lt;script&gt;alert(1)&lt;/script&gt;');
  });

  it('a bidi override in an identifier is shown as a visible mark, so the page never reads as another accession', async () => {
    // U+202E (RIGHT-TO-LEFT OVERRIDE) draws what follows it backwards: ACC-<RLO>4321 was shown
    // as "ACC-1234" in the order list and the order page, the sender RADIS<RLO>X as
    // "RADISX^..." reordered, so the analyst read (and searched for) an accession the order
    // does not have. Isolates (U+2066-U+2069) and embeddings (U+202A-U+202D) do the same.
    const RLO = '\u202e';
    const message = [
      `MSH|^~\\&|RADIS${RLO}X|HOSP|AI|HOSP|20240318101500||ORM^O01|BIDI${RLO}1|P|2.5.1|||||DE|UNICODE UTF-8`,
      `PID|1||PAT-BIDI-1^^^HOSP^MR||MUSTER^ERIKA||19560402|F`,
      `ORC|NW|PL-BIDI${RLO}1^RIS|||||||20240318101500|||1234^DOC${'\u2066'}TOR${'\u2069'}^A`,
      `OBR|1|PL-BIDI${RLO}1^RIS||24627-2^CT Chest^LN||20240318101500||||||||||1234^DOC^A||ACC-${RLO}4321||||||CT`,
    ].join('\r');
    const client = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 10_000,
    });
    try {
      const ack = (await client.send(Buffer.from(message, 'utf8'))).toString('utf8');
      expect(ack).toMatch(/\rMSA\|AA\|/);
    } finally {
      await client.close();
    }
    const accession = `ACC-${RLO}4321`;
    const { id } = (
      await db.query<{ id: string }>(`SELECT id FROM orders WHERE accession_number = $1`, [
        accession,
      ])
    ).rows[0]!;
    const message_ = (
      await db.query<{ id: string }>(
        `SELECT id FROM inbound_messages WHERE message_control_id = $1`,
        [`BIDI${RLO}1`],
      )
    ).rows[0]!;
    const found = await page(`/audit/orders?accession=${encodeURIComponent(accession)}`);
    const pages = [
      found,
      await page('/audit/orders'),
      await page(`/audit/orders/${id}`),
      await page('/audit/messages'),
      await page(`/audit/messages/${message_.id}`),
    ];
    for (const p of pages) {
      expect(p.status).toBe(200);
      // no directional formatting character reaches the page as one, outside the search
      // field that holds what the analyst typed
      const shown = p.html.replace(/<input [^>]*name="accession"[^>]*>/, '');
      expect(shown).not.toMatch(/[\u202a-\u202e\u2066-\u2069]/);
    }
    expect(pages[2]!.html).toContain('ACC-[U+202E]4321');
    expect(pages[2]!.html).toContain('DOC[U+2066]TOR[U+2069]');
    expect(pages[2]!.html).toContain('RADIS[U+202E]X');
    // the search field keeps what was typed, so "search again" searches the same
    expect(found.html).toMatch(/<tbody>[\s\S]*ACC-\[U\+202E\]4321/);
    expect(found.html).toContain(`name="accession" value="${accession}"`);
  });

  it('a control character in a value the raw message shows is drawn as a visible mark, never sent to the browser as one', async () => {
    // A broken RIS's NUL and SOH in MSH-4, an ANSI escape and a backspace in the placer
    // number: the raw message keeps them, and the message page drew them as they are, an
    // invisible ESC and BS in "PLC-[2JX" (and NUL, which HTML does not allow), so the value
    // the analyst read and copied was not the one sent. The placer number is refused (AE 102:
    // no later message could equal it); the same characters in the procedure's text are
    // accepted, and the order page shows them in the mapping lineage.
    const message = (controlId: string, placer: string, procedure: string) =>
      [
        `MSH|^~\\&|RADIS1|IHE\u0000DEMO\u0001|AI|HOSP|20240318101500||ORM^O01|${controlId}|P|2.5.1`,
        `PID|1||PAT-CTL-1^^^HOSP^MR||MUSTER^ERIKA||19560402|F`,
        `ORC|NW|${placer}^RIS|||||||20240318101500`,
        `OBR|1|${placer}^RIS||24627-2^${procedure}^LN||20240318101500||||||||||1234^DOC^A||ACC-CTL-PAGE||||||CT`,
      ].join('\r');
    const client = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 10_000,
    });
    try {
      const refused = await client.send(
        Buffer.from(message('CTL-PAGE-1', 'PLC-\u001b[2J\u0008X', 'CT Chest'), 'latin1'),
      );
      expect(refused.toString('latin1')).toMatch(/\rMSA\|AE\|/);
      const accepted = await client.send(
        Buffer.from(message('CTL-PAGE-2', 'PLC-CTL-PAGE', 'CT \u001b[2J\u0008Chest'), 'latin1'),
      );
      expect(accepted.toString('latin1')).toMatch(/\rMSA\|AA\|/);
    } finally {
      await client.close();
    }
    const messageId = async (controlId: string) =>
      (
        await db.query<{ id: string }>(
          `SELECT id FROM inbound_messages WHERE message_control_id = $1`,
          [controlId],
        )
      ).rows[0]!.id;
    const order = (
      await db.query<{ id: string }>(
        `SELECT id FROM orders WHERE accession_number = 'ACC-CTL-PAGE'`,
      )
    ).rows[0]!;
    const shown = [
      [`/audit/messages/${await messageId('CTL-PAGE-1')}`, 'PLC-[U+001B][2J[U+0008]X'],
      [`/audit/messages/${await messageId('CTL-PAGE-2')}`, 'CT [U+001B][2J[U+0008]Chest'],
      [`/audit/orders/${order.id}`, 'CT [U+001B][2J[U+0008]Chest'],
    ] as const;
    for (const [path, mark] of shown) {
      const { status, html } = await page(path);
      expect(status).toBe(200);
      // eslint-disable-next-line no-control-regex -- the characters that must not reach the page
      expect({ path, raw: html.match(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/g) }).toEqual({
        path,
        raw: null,
      });
      expect({ path, shown: html.includes(mark) }).toEqual({ path, shown: true });
    }
    expect((await page(shown[0][0])).html).toContain('IHE[U+0000]DEMO[U+0001]');
  });
});
