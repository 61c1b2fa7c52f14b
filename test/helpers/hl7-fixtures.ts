import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseHl7 } from '../../src/hl7';

const DIR = join(__dirname, '..', 'fixtures', 'hl7');

/** A fixture's raw bytes, exactly as on the wire (no MLLP framing). */
export function hl7Fixture(name: string): Buffer {
  return readFileSync(join(DIR, name.endsWith('.hl7') ? name : `${name}.hl7`));
}

/** The same message with another MSH-10 (a new message, not a resend). */
export function withControlId(raw: Buffer, controlId: string): Buffer {
  const msg = parseHl7(raw);
  const old = msg.controlId;
  const text = raw.toString('latin1');
  const at = text.indexOf(`|${old}|`);
  if (at < 0) throw new Error('control id not found');
  return Buffer.concat([
    raw.subarray(0, at + 1),
    Buffer.from(controlId, 'latin1'),
    raw.subarray(at + 1 + Buffer.byteLength(old, 'latin1')),
  ]);
}

/** MSA-1 and the ERR segments of an acknowledgment. */
export function ackSummary(reply: Buffer): {
  code: string | undefined;
  controlIdEchoed: string | undefined;
  errors: string[];
  type: string;
} {
  const ack = parseHl7(reply);
  return {
    code: ack.get('MSA-1'),
    controlIdEchoed: ack.get('MSA-2'),
    errors: ack.segmentsById('ERR').map((s) => s.fields.slice(1).join('|')),
    type: ack.get('MSH-9') ?? '',
  };
}
