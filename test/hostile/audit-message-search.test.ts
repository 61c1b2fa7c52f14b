import { Client } from 'pg';
import { MllpClient } from '../../src/hl7';
import { hl7Fixture } from '../helpers/hl7-fixtures';
import { startTestAdapter, TEST_TOKENS, type TestAdapter } from '../helpers/adapter';
import { chestCtRequest, fhirFixture, postFhir } from '../helpers/fhir-fixtures';

jest.setTimeout(120_000);

/**
 * The message browser's "answer text contains" as an analyst uses it: they copy the words of
 * our answer from the page's "Why" column, quotes, umlauts and all, and paste them.
 */
describe('hostile: searching the text of our answers as the page shows it', () => {
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

  const search = async (text: string): Promise<string[]> => {
    const res = await fetch(
      `${adapter.httpUrl}/api/audit/messages?text=${encodeURIComponent(text)}`,
      { headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` } },
    );
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      items: Array<{ messageControlId: string | null; id: string }>;
    };
    return body.items.map((m) => m.id);
  };

  it('finds a refusal by the words the page shows, quotes and non-ASCII included', async () => {
    // An EHR that sends the German word for the patient's sex: refused (422) in our words,
    // the value quoted.
    const patient = fhirFixture('us-core-patient-example');
    const refused = await postFhir(
      adapter,
      '/fhir/ServiceRequest',
      chestCtRequest('PLC-SEARCH-1', {
        contained: [{ ...patient, id: 'pat', gender: 'männlich' }],
        subject: { reference: '#pat' },
      }),
    );
    expect(refused.status).toBe(422);
    const why = (
      await db.query<{ why: string }>(
        `SELECT error #>> '{problems,0,message}' AS why FROM inbound_messages WHERE outcome = 'rejected'`,
      )
    ).rows.map((r) => r.why);
    const shown = why.find((w) => w.includes('männlich'))!;
    expect(shown).toContain('gender: "männlich" is not one of');

    const fhirId = (
      await db.query<{ id: string }>(
        `SELECT id FROM inbound_messages WHERE transport = 'fhir-rest' AND outcome = 'rejected'`,
      )
    ).rows[0]!.id;
    for (const words of ['gender: "männlich"', '"männlich"', 'männlich', 'MÄNNLICH']) {
      expect({ words, found: await search(words) }).toEqual({ words, found: [fhirId] });
    }
    // A RIS whose accession holds a DICOM wildcard: refused in words quoting `\` (the page
    // shows `(* ? \)`, the ACK the HL7 escape `\E\`).
    const swf = hl7Fixture('orm-o01-v231-ihe-swf-zds')
      .toString('latin1')
      .replace(/ACC-20240318-0042/g, 'ACC-0042*');
    const client = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 10_000,
    });
    try {
      expect((await client.send(Buffer.from(swf, 'latin1'))).toString('latin1')).toContain(
        '|Remove the DICOM matching character (* ? \\E\\) from the accession number (OBR-18)',
      );
    } finally {
      await client.close();
    }
    const hl7Id = (
      await db.query<{ id: string }>(
        `SELECT id FROM inbound_messages WHERE message_control_id = 'MSGID20240318144217'`,
      )
    ).rows[0]!.id;
    for (const words of ['matching character (* ? \\)', '(* ? \\E\\)']) {
      expect({ words, found: await search(words) }).toEqual({ words, found: [hl7Id] });
    }
    // what no answer holds still finds nothing; LIKE's own characters are text
    expect(await search('männlich%')).toEqual([]);
    expect(await search('"_"')).toEqual([]);
  });

  it('a control id used by many messages: every filter holds and the pages walk them all', async () => {
    // A RIS whose MSH-10 counter restarted sends the same control id again and again (each a
    // duplicate by sender + MSH-10, stored and answered as the first); another RIS uses it once.
    const swf = hl7Fixture('orm-o01-v231-ihe-swf-zds').toString('latin1');
    const again = swf.replace('MSGID20240318144217', '1001');
    const other = again.replace('|RADIS1|IHEDEMO|', '|ORBIS|KLINIKUM_NORD|');
    const client = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 10_000,
    });
    try {
      for (let i = 0; i < 54; i++) await client.send(Buffer.from(again, 'latin1'));
      await client.send(Buffer.from(other, 'latin1'));
      await client.send(Buffer.from(again, 'latin1'));
    } finally {
      await client.close();
    }
    const stored = (
      await db.query<{ id: string; sender: string }>(
        `SELECT id, sender FROM inbound_messages WHERE message_control_id = '1001'`,
      )
    ).rows;
    expect(stored).toHaveLength(56);
    const page = async (query: string) => {
      const res = await fetch(`${adapter.httpUrl}/api/audit/messages?${query}`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
      });
      expect(res.status).toBe(200);
      return (await res.json()) as {
        items: Array<{ id: string; sender: string }>;
        nextCursor?: string;
      };
    };
    // the other filters are not dropped
    const orbis = await page(`msh10=1001&sender=${encodeURIComponent('ORBIS^KLINIKUM_NORD')}`);
    expect(orbis.items.map((m) => m.sender)).toEqual(['ORBIS^KLINIKUM_NORD']);
    expect((await page('msh10=1001&outcome=accepted')).items).toHaveLength(2);
    // limit and cursor hold: every message once, newest first
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const p = await page(`msh10=1001&limit=20${cursor ? `&cursor=${cursor}` : ''}`);
      expect(p.items.length).toBeLessThanOrEqual(20);
      seen.push(...p.items.map((m) => m.id));
      cursor = p.nextCursor;
    } while (cursor);
    expect(seen).toHaveLength(56);
    expect(new Set(seen)).toEqual(new Set(stored.map((m) => m.id)));
  });

  it('a control id a fixed-width RIS padded with spaces is found by its characters, and its order too', async () => {
    // MSH-10 is ST (trailing blanks not significant); a fixed-width sender pads `1002` to 20
    // characters. The search trims what the analyst types, so the stored id must be trimmed
    // too: before, `1002` (or ` 1002 `) found neither the message nor the order it made.
    const swf = hl7Fixture('orm-o01-v231-ihe-swf-zds')
      .toString('latin1')
      .replace('MSGID20240318144217', `  1002${' '.repeat(14)}`)
      .replace(/ACC-20240318-0042/g, 'ACC-PADDED-1002')
      .replace(/PLC-100234/g, 'PLC-PADDED-1002')
      .replace(/FIL-55012/g, 'FIL-PADDED-1002')
      .replace('1710769337.1', '1710769337.1002');
    const client = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 10_000,
    });
    try {
      expect((await client.send(Buffer.from(swf, 'latin1'))).toString('latin1')).toContain(
        'MSA|AA|',
      );
    } finally {
      await client.close();
    }
    const get = async (path: string) => {
      const res = await fetch(`${adapter.httpUrl}/api/audit/${path}`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
      });
      expect(res.status).toBe(200);
      return (await res.json()) as { items: Array<{ id: string; accessionNumber?: string }> };
    };
    for (const typed of ['1002', ' 1002 ']) {
      const q = encodeURIComponent(typed);
      expect((await get(`messages?msh10=${q}`)).items).toHaveLength(1);
      expect((await get(`orders?msh10=${q}`)).items.map((o) => o.accessionNumber)).toEqual([
        'ACC-PADDED-1002',
      ]);
    }
  });

  it('an order accepted with a long placer number and MSH-10 is found by them; a refused 700-character MSH-10 too', async () => {
    // The front door stores a placer number of 199 characters (the most an identifier may
    // have) and an MSH-10 of 199 (the most a control ID may have, ST; a longer one is refused
    // AR 102 at MSH-10 and the refused message kept: a 700-character one, stored as its start
    // and a SHA-256 to fit its index). Before: the search refused any value over 200
    // characters (400), and a control id over 512 could never match.
    const placer = `PLC-${'7'.repeat(195)}`;
    const control = `MSG-${'8'.repeat(195)}`;
    const refusedControl = `MSG-${'9'.repeat(696)}`;
    const swf = (msh10: string) =>
      hl7Fixture('orm-o01-v231-ihe-swf-zds')
        .toString('latin1')
        .replace('MSGID20240318144217', msh10)
        .replace(/ACC-20240318-0042/g, 'ACC-LONG-1')
        .replace(/PLC-100234/g, placer)
        .replace(/FIL-55012/g, 'FIL-LONG-1')
        .replace('1710769337.1', '1710769337.3003');
    const client = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 10_000,
    });
    try {
      expect((await client.send(Buffer.from(swf(control), 'latin1'))).toString('latin1')).toContain(
        'MSA|AA|',
      );
      expect(
        (await client.send(Buffer.from(swf(refusedControl), 'latin1'))).toString('latin1'),
      ).toContain('MSA|AR|');
    } finally {
      await client.close();
    }
    const get = async (path: string) => {
      const res = await fetch(`${adapter.httpUrl}/api/audit/${path}`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
      });
      const body = (await res.json()) as { items?: Array<{ accessionNumber?: string }> };
      return { status: res.status, items: body.items?.length };
    };
    expect(await get(`orders?placer=${placer}`)).toEqual({ status: 200, items: 1 });
    expect(await get(`orders?msh10=${control}`)).toEqual({ status: 200, items: 1 });
    expect(await get(`messages?msh10=${control}`)).toEqual({ status: 200, items: 1 });
    expect(await get(`messages?msh10=${refusedControl}`)).toEqual({ status: 200, items: 1 });
  });

  it('identifiers holding a control character are found by what the sender sent, as they are stored', async () => {
    // A broken RIS's BEL in MSH-10: the value is stored with the control character as U+FFFD
    // (the raw bytes keep it). Before, the search looked for the character as typed (or pasted
    // from the RIS's log) and found nothing. An ESC in the accession is refused (AE 102: no
    // study could match it), and the refused message is found the same way.
    const swf = (msh10: string, accession: string, n: number) =>
      hl7Fixture('orm-o01-v231-ihe-swf-zds')
        .toString('latin1')
        .replace('MSGID20240318144217', msh10)
        .replace(/ACC-20240318-0042/g, accession)
        .replace(/PLC-100234/g, `PLC-CTL-${n}`)
        .replace(/FIL-55012/g, `FIL-CTL-${n}`)
        .replace('1710769337.1', `1710769337.400${n}`);
    const client = new MllpClient({
      host: '127.0.0.1',
      port: adapter.mllpPort,
      responseTimeoutMs: 10_000,
    });
    try {
      expect(
        (await client.send(Buffer.from(swf('CTL\u0007-1', 'ACC-CTL-1', 4), 'latin1'))).toString(
          'latin1',
        ),
      ).toContain('MSA|AA|');
      const refused = (
        await client.send(Buffer.from(swf('CTL\u0007-2', 'ACC-\u001bCTL', 5), 'latin1'))
      ).toString('latin1');
      expect(refused).toContain('MSA|AE|');
      expect(refused).toContain('ERR|OBR^1^18^102');
    } finally {
      await client.close();
    }
    const found = async (path: string) => {
      const res = await fetch(`${adapter.httpUrl}/api/audit/${path}`, {
        headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` },
      });
      const body = (await res.json()) as { items?: Array<{ placerOrderNumber?: string }> };
      return { status: res.status, items: body.items?.length };
    };
    const q = encodeURIComponent;
    for (const [accepted, refused] of [
      ['CTL\u0007-1', 'CTL\u0007-2'],
      ['CTL\ufffd-1', 'CTL\ufffd-2'], // as the page shows them
    ]) {
      expect({ accepted, m: await found(`messages?msh10=${q(accepted!)}`) }).toEqual({
        accepted,
        m: { status: 200, items: 1 },
      });
      expect({ accepted, o: await found(`orders?msh10=${q(accepted!)}`) }).toEqual({
        accepted,
        o: { status: 200, items: 1 },
      });
      expect({ refused, m: await found(`messages?msh10=${q(refused!)}`) }).toEqual({
        refused,
        m: { status: 200, items: 1 },
      });
    }
  });

  // `text` has no index (it looks in our answers, JSON and bytes): a word no message holds
  // read every message ever stored before answering (200,000 messages: 0.3 s, 1.3 s for
  // non-ASCII words; seconds more per million, on a pooled connection ingest shares).
  it('a text search reads a bounded number of messages per page, says how far it got, and Older searches on', async () => {
    const sender = 'SCAN|bounded';
    const word = 'NEEDLE-7f3a';
    // one message with the word, then 12,000 newer ones without it
    await db.query(
      `INSERT INTO inbound_messages (transport, sender, message_type, message_control_id, raw, outcome, error, received_at)
       VALUES ('mllp', $1, 'ORM^O01', 'SCAN-NEEDLE', '\\x4d'::bytea, 'rejected', $2::jsonb, now() - interval '1 day')`,
      [sender, JSON.stringify({ message: `PID-3 ${word} is required` })],
    );
    await db.query(
      `INSERT INTO inbound_messages (transport, sender, message_type, message_control_id, raw, outcome, error, received_at)
       SELECT 'mllp', $1, 'ORM^O01', 'SCAN-' || g, '\\x4d'::bytea, 'rejected',
              jsonb_build_object('message', 'PID-3 is required ' || g), now() - g * interval '1 second'
         FROM generate_series(1, 12000) g`,
      [sender],
    );
    try {
      const get = async (cursor?: string) => {
        const res = await fetch(
          `${adapter.httpUrl}/api/audit/messages?sender=${encodeURIComponent(sender)}&text=${word}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
          { headers: { authorization: `Bearer ${TEST_TOKENS.analyst}` } },
        );
        expect(res.status).toBe(200);
        return (await res.json()) as {
          items: Array<{ messageControlId: string }>;
          nextCursor?: string;
          searchedTo?: string;
        };
      };
      // before: the needle on the first page, found by reading all 12,001
      const first = await get();
      expect(first.items).toEqual([]);
      expect(first.nextCursor).toBeDefined();
      expect(Date.parse(first.searchedTo!)).toBeLessThan(Date.now() - 9_000_000);
      const second = await get(first.nextCursor);
      expect(second.items.map((m) => m.messageControlId)).toEqual(['SCAN-NEEDLE']);
      expect(second.nextCursor).toBeUndefined();
      expect(second.searchedTo).toBeUndefined();
      // the page says so in words, with the link that searches on
      const page = await fetch(
        `${adapter.httpUrl}/audit/messages?sender=${encodeURIComponent(sender)}&text=${word}`,
        { headers: { authorization: `Bearer ${TEST_TOKENS.analyst}`, accept: 'text/html' } },
      );
      const html = await page.text();
      expect(html).toContain('messages are read per page for a text');
      expect(html).toMatch(/href="\/audit\/messages\?[^"]*cursor=[^"]+">Older messages/);
    } finally {
      await db.query(`DELETE FROM inbound_messages WHERE sender = $1`, [sender]);
    }
  });
});
