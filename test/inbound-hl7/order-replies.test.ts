import { startMllpHarness, type MllpHarness } from '../helpers/mllp-harness';
import { ackSummary, hl7Fixture } from '../helpers/hl7-fixtures';

jest.setTimeout(90_000);

/**
 * The per-order answer to a cancel or change is valid for the structure it declares. ORI^O24
 * (v2.5.1 chapter 4, the same through v2.8) has in each ORDER group an ORC, an OBR and one or more
 * IPC (all required): an IHE RAD-4 OMI^O23 cancel was answered `MSH MSA ORC|CR|…`, an ORI a
 * validating RIS (HAPI's ORI_O24 parser, an engine checking the structure) refuses. Real
 * adapter, real socket, real PostgreSQL.
 */
describe('ORR^O02 / ORI^O24: each ORDER group complete for its structure', () => {
  let h: MllpHarness;
  beforeAll(async () => {
    h = await startMllpHarness();
  });
  afterAll(() => h?.close());

  /** Segments of a reply as [id, fields...] (field 1 at index 1; MSH: MSH-2 at 1). */
  const segmentsOf = (reply: Buffer) =>
    reply
      .toString('utf8')
      .split('\r')
      .filter((line) => line !== '')
      .map((line) => line.split('|'));

  it('an IHE RAD-4 OMI^O23 cancel is answered ORI^O24 with ORC, OBR and the IPC of each scheduled step', async () => {
    expect(ackSummary(await h.mllp.send(hl7Fixture('omi-o23-v251-ihe-ipc'))).code).toBe('AA');
    const reply = await h.mllp.send(hl7Fixture('omi-o23-v251-ihe-ipc-cancel'));
    const ack = ackSummary(reply);
    expect(ack.code).toBe('AA');
    const segments = segmentsOf(reply);
    expect(segments[0]![8]).toBe('ORI^O24^ORI_O24');
    expect(segments.map((s) => s[0])).toEqual(['MSH', 'MSA', 'ORC', 'OBR', 'IPC', 'IPC']);
    const [orc, obr, ipc1, ipc2] = segments.slice(2);
    expect(orc!.slice(0, 4)).toEqual(['ORC', 'CR', 'DP-776120^OF_RIS', 'RQ-45120^OF_RIS']);
    // OBR-2/-3 the order's numbers, OBR-4 (required) the procedure as the RIS named it
    expect(obr!.slice(0, 5)).toEqual([
      'OBR',
      '1',
      'DP-776120^OF_RIS',
      'RQ-45120^OF_RIS',
      '36643-5^XR Chest 2 Views^LN',
    ]);
    // IPC-1..4 (required: accession, requested procedure, study, scheduled step), IPC-5
    // modality, as sent; nothing else of the order (no PHI) is written back
    const uid = '1.2.250.1.59.453.859.998877.20250204.91533.1';
    expect(ipc1).toEqual([
      'IPC',
      'A20250204-0017^OF_RIS',
      'RQ-45120',
      uid,
      'SPS-45120-1',
      'DX^Digital Radiography^DCM',
    ]);
    expect(ipc2).toEqual([
      'IPC',
      'A20250204-0017^OF_RIS',
      'RQ-45120',
      uid,
      'SPS-45120-2',
      'DX^Digital Radiography^DCM',
    ]);
    expect(reply.toString('utf8')).not.toMatch(/DUBOIS|Dyspn/);
  });

  it('an OMI^O23 cancel whose group has no IPC (a lenient sender) gets the plain ACK^O23, never an ORI without one', async () => {
    // the same order under another placer number and control ID; the cancel sent without IPC
    const renumbered = (name: string, controlId: string, keep: (line: string) => boolean) =>
      Buffer.from(
        hl7Fixture(name)
          .toString('utf8')
          .split('\r')
          .filter(keep)
          .join('\r')
          .replace(/DP-776120/g, 'DP-776121')
          .replace(/\|OF2025[^|]*\|P\|/, `|${controlId}|P|`),
        'utf8',
      );
    const order = renumbered('omi-o23-v251-ihe-ipc', 'OF-NOIPC-1', () => true);
    expect(ackSummary(await h.mllp.send(order)).code).toBe('AA');
    const cancel = renumbered(
      'omi-o23-v251-ihe-ipc-cancel',
      'OF-NOIPC-2',
      (l) => !l.startsWith('IPC'),
    );
    const reply = await h.mllp.send(cancel);
    expect(ackSummary(reply)).toMatchObject({ code: 'AA', controlIdEchoed: 'OF-NOIPC-2' });
    const segments = segmentsOf(reply);
    expect(segments[0]![8]).toBe('ACK^O23^ACK');
    // no ORDER group at all (a warning ERR may say what the group lacked)
    expect(segments.map((s) => s[0]).filter((id) => id !== 'ERR')).toEqual(['MSH', 'MSA']);
    expect(segments.filter((s) => s[0] === 'ERR').every((s) => s[4] === 'W')).toBe(true);
    const { rows } = await h.db.query(
      `SELECT cancel_requested_at FROM orders WHERE placer_order_number = 'DP-776121'`,
    );
    expect(rows).toHaveLength(1);
    expect(rows[0].cancel_requested_at).not.toBeNull();
  });
});
