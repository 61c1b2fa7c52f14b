import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MllpClient } from '../../src/hl7';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter';
import { hl7Fixture, withControlId } from '../helpers/hl7-fixtures';

/**
 * Issue #20 item 2: ORC-2/OBR-2 (and ORC-3/OBR-3, IPC-1/OBR-18, IPC-3/ZDS-1, the priorities)
 * must carry the same value (HL7 v2.5.1 §4.5.1.2, §4.5.3.2). The IHE SWF ORM^O01 with an
 * OBR-2 that differs from its ORC-2 — a RIS that renumbers the request but not the order — is
 * answered AE with ERR at OBR-2 and stored as refused; a site that tolerates it
 * (`mappings.hl7.fieldConflicts: warn`) gets AA with a warning ERR and a quirk the analyst sees.
 */
function disagreeing(controlId: string): Buffer {
  return Buffer.from(
    withControlId(hl7Fixture('orm-o01-v231-ihe-swf-zds'), controlId)
      .toString('latin1')
      .replace(/PLC-100234/g, `PLC-${controlId}`)
      .replace(/ACC-20240318-0042/g, `ACC-${controlId}`)
      .replace(/\rOBR\|1\|PLC-[^|^]*/, `\rOBR|1|OTHER-${controlId}`),
    'latin1',
  );
}

async function send(adapter: TestAdapter, message: Buffer): Promise<string> {
  const client = new MllpClient({
    host: '127.0.0.1',
    port: adapter.mllpPort,
    responseTimeoutMs: 10_000,
  });
  try {
    return (await client.send(message)).toString('latin1');
  } finally {
    await client.close();
  }
}

describe('placer/filler numbers that disagree are never chosen silently', () => {
  it('default: AE with ERR at OBR-2 naming both values; nothing ordered', async () => {
    const adapter = await startTestAdapter({ JOBS_ENABLED: 'false' });
    try {
      const ack = await send(adapter, disagreeing('CONF-1'));
      expect(ack).toMatch(/\rMSA\|AE\|CONF-1/);
      expect(ack).toMatch(/\rERR\|OBR\^1\^2\^102/);
      expect(ack).toMatch(/OBR-2 \(OTHER-CONF-1/);
      const rows = await adapter.dataSource.query(`SELECT count(*)::int AS n FROM orders`);
      expect(rows[0].n).toBe(0);
    } finally {
      await adapter.close();
    }
  });

  it("a disagreement in the second order of an OMI^O23 names that order's own ORC, not the first order's", async () => {
    // The v2.8 EHR order set (CT head + MR brain) with the MR order's OBR-2 renumbered. Before:
    // ERR-8 "OBR[2]-2 (556073\S\EPC) differs from ORC-2 (556072\S\EPC); ORC-2 is used": ORC-2 is
    // the CT order's (556071^EPC), so the text named a field holding another value.
    const adapter = await startTestAdapter({ JOBS_ENABLED: 'false' });
    try {
      const message = Buffer.from(
        withControlId(hl7Fixture('omi-o23-v28-multi-order'), 'CONF-G2')
          .toString('latin1')
          .replace('\rOBR|2|556072^EPC|', '\rOBR|2|556073^EPC|'),
        'latin1',
      );
      const ack = await send(adapter, message);
      expect(ack).toMatch(/\rMSA\|CE\|CONF-G2/);
      expect(ack).toMatch(/\rERR\|\|OBR\^2\^2\^1\|102\^/);
      expect(ack).toMatch(
        /OBR\[2\]-2 \(556073\\S\\EPC\) differs from ORC\[2\]-2 \(556072\\S\\EPC\)/,
      );
      expect(ack).not.toMatch(/differs from ORC-2/);
    } finally {
      await adapter.close();
    }
  });

  it('two disagreements in a v2.3.1 message: one ERR whose ERR-1 repeats, as a v2.3-2.4 ACK holds one ERR', async () => {
    // ACK and ORR_O02 before v2.5 are MSH, MSA, [ERR] (one ERR, its ERR-1 ELD repeating); the
    // ERR segment repeats only from v2.5. Before: one ERR segment per problem, an ACK a
    // validating v2.3.1 RIS (HAPI's v231 ACK model) cannot read past the first.
    const adapter = await startTestAdapter({ JOBS_ENABLED: 'false' });
    try {
      const message = Buffer.from(
        disagreeing('CONF-3')
          .toString('latin1')
          .replace(/(\rOBR\|1\|[^|]*\|)FIL-55012/, '$1FIL-OTHER'),
        'latin1',
      );
      const ack = await send(adapter, message);
      expect(ack).toMatch(/\rMSA\|AE\|CONF-3\|/);
      const errs = ack.split('\r').filter((s) => s.startsWith('ERR|'));
      expect(errs).toEqual([
        'ERR|OBR^1^2^102&Data type error&HL70357~OBR^1^3^102&Data type error&HL70357',
      ]);
    } finally {
      await adapter.close();
    }
  });

  it('a site that tolerates it: AA, the ORC-2 number used, a quirk recorded', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'conflicts-'));
    const config = join(dir, 'site.yaml');
    writeFileSync(config, 'mappings:\n  hl7:\n    fieldConflicts: warn\n');
    const adapter = await startTestAdapter({ JOBS_ENABLED: 'false', CONFIG_FILE: config });
    try {
      const ack = await send(adapter, disagreeing('CONF-2'));
      expect(ack).toMatch(/\rMSA\|AA\|CONF-2/);
      // v2.3.1 has no ERR severity: a warning would read as an error, so the ACK carries none
      // (v2.5+ would carry ERR-4 W); the quirk below is what the analyst sees.
      expect(ack).not.toMatch(/\rERR\|/);
      const [order] = await adapter.dataSource.query(`SELECT placer_order_number FROM orders`);
      expect(order.placer_order_number).toBe('PLC-CONF-2');
      const [message] = await adapter.dataSource.query(
        `SELECT quirks FROM inbound_messages WHERE message_control_id = 'CONF-2'`,
      );
      expect(JSON.stringify(message.quirks)).toMatch(/field-conflict.*OBR-2/);
    } finally {
      await adapter.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/**
 * An OMI^O23 repeats IPC once per scheduled procedure step of the order's one requested
 * procedure (IHE RAD TF-2 RAD-4): IPC-1 (accession), IPC-2 and IPC-3 (Study Instance UID) are
 * the requested procedure's, the same in every IPC of the group. The IHE RAD-4 order whose
 * second step names another study (a RIS that made a study UID per step) had the first used
 * and the second never looked at: the order waited for one study while the RIS's modality
 * worklist had the other. Now the repeats are held to the same rule as the sources of a
 * must-agree row.
 */
describe('IPC repeated per scheduled step: the requested procedure is one', () => {
  const secondStepOtherStudy = (controlId: string): Buffer => {
    const text = withControlId(hl7Fixture('omi-o23-v251-ihe-ipc'), controlId)
      .toString('utf8')
      .replace(/DP-776120/g, `DP-${controlId}`)
      .replace(/A20250204-0017/g, `A-${controlId}`);
    const lines = text.split('\r');
    const last = lines.map((l) => l.startsWith('IPC|')).lastIndexOf(true);
    lines[last] = lines[last]!.replace('.91533.1|SPS-45120-2', '.91533.2|SPS-45120-2');
    return Buffer.from(lines.join('\r'), 'utf8');
  };

  it('default: a second IPC naming another study is AE 102 at IPC[2]-3, nothing ordered', async () => {
    const adapter = await startTestAdapter({ JOBS_ENABLED: 'false' });
    try {
      const ack = await send(adapter, secondStepOtherStudy('IPC-1'));
      expect(ack).toMatch(/\rMSA\|AE\|IPC-1/);
      expect(ack).toMatch(/\rERR\|\|IPC\^2\^3\^1\|102\^/);
      expect(ack).toMatch(/IPC\[2\]-3 \(1\.2\.250\.1\.59\.453\.859\.998877\.20250204\.91533\.2\)/);
      const rows = await adapter.dataSource.query(`SELECT count(*)::int AS n FROM orders`);
      expect(rows[0].n).toBe(0);
    } finally {
      await adapter.close();
    }
  });

  it("a site that tolerates it: AA with a warning ERR, the first step's study used, a quirk recorded", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'conflicts-'));
    const config = join(dir, 'site.yaml');
    writeFileSync(config, 'mappings:\n  hl7:\n    fieldConflicts: warn\n');
    const adapter = await startTestAdapter({ JOBS_ENABLED: 'false', CONFIG_FILE: config });
    try {
      const ack = await send(adapter, secondStepOtherStudy('IPC-2'));
      expect(ack).toMatch(/\rMSA\|AA\|IPC-2/);
      expect(ack).toMatch(/\rERR\|\|IPC\^2\^3\^1\|102\^[^|]*\|W\|/);
      const [order] = await adapter.dataSource.query(`SELECT study_instance_uid FROM orders`);
      expect(order.study_instance_uid).toBe('1.2.250.1.59.453.859.998877.20250204.91533.1');
      const [message] = await adapter.dataSource.query(
        `SELECT quirks FROM inbound_messages WHERE message_control_id = 'IPC-2'`,
      );
      expect(JSON.stringify(message.quirks)).toMatch(/field-conflict.*IPC\[2\]-3/);
    } finally {
      await adapter.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the IHE RAD-4 order with two steps of one study is taken as before', async () => {
    const adapter = await startTestAdapter({ JOBS_ENABLED: 'false' });
    try {
      const ack = await send(adapter, withControlId(hl7Fixture('omi-o23-v251-ihe-ipc'), 'IPC-3'));
      expect(ack).toMatch(/\rMSA\|AA\|IPC-3\r/);
      expect(ack).not.toMatch(/\rERR\|/);
    } finally {
      await adapter.close();
    }
  });
});
