import { MllpClient } from '../../src/hl7';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter';
import { ackSummary, hl7Fixture, withControlId } from '../helpers/hl7-fixtures';

/**
 * Issue #17 item 9: MSH-11 processing IDs (HL7 table 0103). A test RIS sends `T` while a site
 * connects; with the in-process sandbox as the upstream that is accepted by default, and a
 * site names what it takes with HL7_PROCESSING_IDS. Messages are the IHE SWF ORM^O01 fixture
 * with its MSH-11 changed.
 */
function withProcessingId(controlId: string, id: string): Buffer {
  const text = withControlId(hl7Fixture('orm-o01-v231-ihe-swf-zds'), controlId).toString('latin1');
  const lines = text.split('\r');
  const msh = lines[0]!.split('|');
  msh[10] = id; // MSH-11 (MSH-1 is the separator itself)
  lines[0] = msh.join('|');
  return Buffer.from(
    lines
      .join('\r')
      .replace(/PLC-100234/g, `PLC-${controlId}`)
      .replace(/ACC-20240318-0042/g, `ACC-${controlId}`),
    'latin1',
  );
}

async function send(adapter: TestAdapter, message: Buffer) {
  const client = new MllpClient({
    host: '127.0.0.1',
    port: adapter.mllpPort,
    responseTimeoutMs: 10_000,
  });
  try {
    return ackSummary(await client.send(message));
  } finally {
    await client.close();
  }
}

describe('MSH-11 processing IDs (HL7_PROCESSING_IDS)', () => {
  it('with the in-process sandbox, a training (T) message is accepted by default; D is not', async () => {
    const adapter = await startTestAdapter({ JOBS_ENABLED: 'false' });
    try {
      expect(await send(adapter, withProcessingId('PID-T-1', 'T'))).toMatchObject({ code: 'AA' });
      expect(await send(adapter, withProcessingId('PID-P-1', 'P'))).toMatchObject({ code: 'AA' });
      const d = await send(adapter, withProcessingId('PID-D-1', 'D'));
      expect(d).toMatchObject({ code: 'AR', controlIdEchoed: 'PID-D-1' });
      expect(d.errors.join(' ')).toMatch(/\b202\b/);
    } finally {
      await adapter.close();
    }
  });

  it('HL7_PROCESSING_IDS=P refuses a training message with AR 202 at MSH-11', async () => {
    const adapter = await startTestAdapter({ JOBS_ENABLED: 'false', HL7_PROCESSING_IDS: 'P' });
    try {
      const t = await send(adapter, withProcessingId('PID-T-2', 'T'));
      expect(t).toMatchObject({ code: 'AR', controlIdEchoed: 'PID-T-2' });
      expect(t.errors.join(' ')).toMatch(/\b202\b/);
      expect(await send(adapter, withProcessingId('PID-P-2', 'P'))).toMatchObject({ code: 'AA' });
    } finally {
      await adapter.close();
    }
  });
});
