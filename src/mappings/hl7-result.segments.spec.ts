import { parseHl7 } from '../hl7/hl7-message';
import type { PublicationInput } from './publication.model';
import { pidOf, pv1Of } from './hl7-result.segments';

/**
 * PID and PV1 of our ORU are the order's own segments as received. An order may carry control
 * characters in them (accepted: the mapped values hold U+FFFD, the raw message what was sent);
 * written raw into the ORU, an FS (0x1C) would end the RIS's MLLP frame mid-message and a NUL
 * is no ST character. They are written as hexadecimal data (\Xhh\, v2.5.1 section 2.7).
 */
describe('PID/PV1 copied from the order into the ORU', () => {
  const order = parseHl7(
    Buffer.from(
      'MSH|^~\\&|RIS|H|AI|H|20240318144217||ORM^O01|C1|P|2.3.1\r' +
        'PID|||PAT-4711^^^HOSPA^MR||SCH\x00MIDT\x1c^AN\x07NA\x7f^^^^^L||19560214|F\r' +
        'PV1||O|RAD\x1c^^^RADIOLOGY\r' +
        'ORC|NW|PLC-1^RIS\r' +
        'OBR|1|PLC-1^RIS\r',
      'latin1',
    ),
  );

  it('keeps the segment as received, control characters as \\Xhh\\', () => {
    expect(pidOf({} as PublicationInput, order)).toBe(
      'PID|||PAT-4711^^^HOSPA^MR||SCH\\X00\\MIDT\\X1C\\^AN\\X07\\NA\\X7F\\^^^^^L||19560214|F',
    );
    expect(pv1Of(order)).toBe('PV1||O|RAD\\X1C\\^^^RADIOLOGY');
  });

  it('writes no byte below 0x20 or DEL', () => {
    const text = pidOf({} as PublicationInput, order) + pv1Of(order);
    // eslint-disable-next-line no-control-regex
    expect(text).not.toMatch(/[\x00-\x1f\x7f]/);
  });

  it('leaves a clean segment byte for byte, escapes included', () => {
    const clean = parseHl7(
      'MSH|^~\\&|RIS|H|AI|H|2024||ORM^O01|C2|P|2.3.1\rPID|||1^^^H||M\\S\\ller\\E\\^A\rORC|NW|1\r',
    );
    expect(pidOf({} as PublicationInput, clean)).toBe('PID|||1^^^H||M\\S\\ller\\E\\^A');
  });
});
