import {
  acceptAckWanted,
  ackModeOf,
  buildAck,
  buildUnparseableAck,
  Hl7ErrorDetail,
} from './hl7-ack.builder';
import { isValidUtf8 } from './hl7-charset';
import { parseHl7 } from './hl7-message';
import { checkStructure } from './hl7-structure.validator';

const NOW = new Date('2026-03-01T08:09:10Z');

function inbound(version: string, extra = ''): string {
  return (
    `MSH|^~\\&|RIS^1.2.3^ISO|HOSP|AI|RAD|20240318144217||ORM^O01^ORM_O01|IN-42|P|${version}${extra}\r` +
    'PID|1||A1^^^HOSP^MR\rORC|NW|P1\rOBR|1|P1||CT1^CT Head^L\r'
  );
}

const ORC_ERROR: Hl7ErrorDetail = {
  location: 'ORC[2]-1',
  code: 103,
  severity: 'E',
  message: 'Order control RP not supported',
};

/** The lines of an AE answer to the sample message in `version`, carrying `errors`. */
function errorAckLines(version: string, errors: Hl7ErrorDetail[], controlId: string): string[] {
  return buildAck({
    inbound: parseHl7(inbound(version)),
    outcome: 'error',
    errors,
    controlId,
    now: NOW,
  }).text.split('\r');
}

describe('buildAck', () => {
  it('swaps sender and receiver, echoes version and processing ID, and uses its own control ID', () => {
    const ack = buildAck({
      inbound: parseHl7(inbound('2.5.1')),
      outcome: 'accept',
      controlId: 'OUT-1',
      now: NOW,
    });
    expect(ack.code).toBe('AA');
    expect(ack.text.split('\r')).toEqual([
      'MSH|^~\\&|AI|RAD|RIS^1.2.3^ISO|HOSP|20260301080910+0000||ACK^O01^ACK|OUT-1|P|2.5.1',
      'MSA|AA|IN-42',
      '',
    ]);
    const parsed = parseHl7(ack.bytes);
    expect(parsed.get('MSA-2')).toBe('IN-42');
    expect(parsed.get('MSH-5.2')).toBe('1.2.3');
  });

  it('writes v2.5+ errors in ERR-2 (location), ERR-3 (table 0357), ERR-4, ERR-8', () => {
    for (const version of ['2.5', '2.5.1', '2.6', '2.7', '2.8']) {
      const lines = errorAckLines(
        version,
        [ORC_ERROR, { location: 'PID-3[2].4.1', code: 101, severity: 'W', message: 'x|y' }],
        'OUT-2',
      );
      expect(lines[1]).toBe('MSA|AE|IN-42');
      expect(lines[2]).toBe(
        'ERR||ORC^2^1^1|103^Table value not found^HL70357|E||||Order control RP not supported',
      );
      // The user message is escaped like every other value.
      expect(lines[3]).toBe('ERR||PID^1^3^2^4^1|101^Required field missing^HL70357|W||||x\\F\\y');
    }
  });

  it('writes v2.3/v2.4 errors in ERR-1 (segment^sequence^field^code&text&system) and MSA-3', () => {
    for (const version of ['2.3', '2.3.1', '2.4']) {
      const lines = errorAckLines(
        version,
        [ORC_ERROR, { location: 'OBR-24', code: 103, severity: 'W', message: 'warning' }],
        'OUT-3',
      );
      expect(lines[0]).toContain(version === '2.3' ? '|ACK^O01|' : '|ACK^O01^ACK|');
      expect(lines[1]).toBe('MSA|AE|IN-42|Order control RP not supported');
      expect(lines[2]).toBe('ERR|ORC^2^1^103&Table value not found&HL70357');
      expect(lines).toHaveLength(4); // the warning is not sent: v2.3/2.4 ERR has no severity
    }
  });

  it('cuts MSA-3 (ST, 80 before v2.5) to 80 characters, never inside an escape or a surrogate pair', () => {
    // The sentence the live listener wrote for an unknown XX order: 83 characters in MSA-3.
    const unknown =
      'Unknown order: no order with this placer/filler number to change (ORC/OBR group 1)';
    const msa3 = (version: string, message: string): string =>
      errorAckLines(version, [{ ...ORC_ERROR, message }], 'OUT-5')[1].split('|')[3];
    for (const version of ['2.1', '2.2', '2.3', '2.3.1', '2.4']) {
      expect(msa3(version, unknown)).toBe(unknown.slice(0, 80));
      // `|` at characters 79: its escape \F\ (79-81) does not fit, and is not cut in two.
      const piped = `${'a'.repeat(78)}|bc`;
      expect(msa3(version, piped)).toBe('a'.repeat(78));
      // An emoji (two UTF-16 units) at 80-81 is left out whole, not half of it written.
      const emoji = `${'b'.repeat(79)}\u{1F600}z`;
      expect(msa3(version, emoji)).toBe('b'.repeat(79));
      const fits = `${'c'.repeat(77)}\\x`;
      expect(msa3(version, fits)).toBe(`${'c'.repeat(77)}\\E\\`);
    }
    // v2.5+ writes no MSA-3; the whole sentence is ERR-8.
    const modern = errorAckLines('2.5.1', [{ ...ORC_ERROR, message: unknown }], 'OUT-6');
    expect(modern[1]).toBe('MSA|AE|IN-42');
    expect(modern[2].split('|')[8]).toBe(unknown);
  });

  it('writes the brief in MSA-3 (v2.1-2.4) when the sentence is longer than 80, the sentence in ERR-8', () => {
    // The sentence the live listener wrote for a re-sent placer number with another
    // procedure (207 characters): cut at 80, its advice (XO, or CA and NW) was lost.
    const duplicate: Hl7ErrorDetail = {
      location: 'ORC-2',
      code: 205,
      severity: 'E',
      message:
        "Duplicate placer order number (ORC/OBR group 1): it already names this patient's order with another procedure; nothing was changed. Send a change as XO, or cancel (CA) and order again (NW) under a new number",
      brief: 'Duplicate placer number (ORC/OBR group 1): change by XO, or CA and new NW',
    };
    const msa3 = (version: string, error: Hl7ErrorDetail): string =>
      errorAckLines(version, [error], 'OUT-9')[1].split('|')[3];
    for (const version of ['2.1', '2.2', '2.3', '2.3.1', '2.4']) {
      expect(msa3(version, duplicate)).toBe(duplicate.brief);
      // A sentence that fits is written whole, its brief unused.
      expect(msa3(version, { ...ORC_ERROR, brief: 'unused' })).toBe(ORC_ERROR.message);
      // A brief is escaped and bounded like the sentence: `|` is \F\, never past 80.
      const wide = { ...duplicate, brief: `${'d'.repeat(78)}|e` };
      expect(msa3(version, wide)).toBe('d'.repeat(78));
    }
    // v2.5+: no MSA-3; ERR-8 carries the whole sentence, the brief is not used.
    const modern = errorAckLines('2.5.1', [duplicate], 'OUT-10');
    expect(modern[1]).toBe('MSA|AE|IN-42');
    expect(modern[2].split('|')[8]).toBe(duplicate.message);
  });

  it('cuts ERR-8 (TX, 250 in v2.5-2.6) to 250 and gives the whole text in ERR-7 (TX, 2048)', () => {
    const long = `${'Message type XYZ not supported; '.repeat(9)}this receiver takes ORM^O01|x`; // 318
    const escaped = long.replace('^', '\\S\\').replace('|', '\\F\\');
    for (const version of ['2.5', '2.5.1', '2.6']) {
      const err = errorAckLines(version, [{ ...ORC_ERROR, message: long }], 'OUT-7')[2].split('|');
      expect(err[8]).toBe(long.slice(0, 250));
      expect(err[7]).toBe(escaped);
    }
    // v2.7 dropped the length of both; the text is ERR-8 alone, as before.
    const v27 = errorAckLines('2.7', [{ ...ORC_ERROR, message: long }], 'OUT-8')[2].split('|');
    expect(v27[7]).toBe('');
    expect(v27[8]).toBe(escaped);
    // The AR for an unreadable header (v2.5.1) is held to the same lengths.
    const ar = buildUnparseableAck({
      raw: Buffer.from('MSH|^~|RIS|HOSP|AI|RAD|20240318||ORM^O01|C1|P|2.5.1\r'),
      reason: long,
      mshField: 2,
      ourApplication: 'AI',
      ourFacility: 'RAD',
      now: NOW,
      controlId: 'OUT-9',
    })
      .toString('latin1')
      .split('\r')[2]
      .split('|');
    expect(ar[8]).toHaveLength(250);
    expect(ar[7]).toBe(`Not an HL7 v2 message: ${escaped}`);
  });

  it('uses enhanced-mode codes when MSH-15/MSH-16 are valued', () => {
    const m = parseHl7(inbound('2.5.1', '|||AL|NE'));
    expect(ackModeOf(m)).toBe('enhanced');
    const codes = (['accept', 'error', 'reject'] as const).map(
      (outcome) => buildAck({ inbound: m, outcome, controlId: 'X', now: NOW }).code,
    );
    expect(codes).toEqual(['CA', 'CE', 'CR']);
    expect(ackModeOf(parseHl7(inbound('2.5.1')))).toBe('original');
  });

  it('answers MSH-15 NE with MSH-16 AL/ER/SU (IHE LAW style) with the application ack, AA/AE/AR', () => {
    // Before: CA, the accept acknowledgment the sender said it never wants.
    const m = parseHl7(inbound('2.5.1', '|||NE|AL'));
    const codes = (['accept', 'error', 'reject'] as const).map(
      (outcome) => buildAck({ inbound: m, outcome, controlId: 'X', now: NOW }).code,
    );
    expect(codes).toEqual(['AA', 'AE', 'AR']);
    expect(acceptAckWanted(m, 'accept')).toBe(true);
    const onError = parseHl7(inbound('2.5.1', '|||NE|ER'));
    expect(acceptAckWanted(onError, 'accept')).toBe(false);
    expect(acceptAckWanted(onError, 'error')).toBe(true);
    // An accept ack asked for (or MSH-16 NE too) keeps the accept codes.
    for (const fields of ['|||AL|AL', '|||SU|ER', '|||NE|NE', '||||AL']) {
      expect(
        buildAck({
          inbound: parseHl7(inbound('2.5.1', fields)),
          outcome: 'accept',
          controlId: 'X',
          now: NOW,
        }).code,
      ).toBe('CA');
    }
  });

  it('answers with the application ack when MSH-15 wants no accept ack for this outcome and MSH-16 wants one', () => {
    // ER|AL (accept ack on error only, application ack always) was answered CA on success,
    // the accept ack it wants only on error, and the AA it asked for never came; SU|ER
    // likewise (CE) on error.
    const answer = (fields: string, outcome: 'accept' | 'error' | 'reject') => {
      const m = parseHl7(inbound('2.5.1', fields));
      return acceptAckWanted(m, outcome)
        ? buildAck({ inbound: m, outcome, controlId: 'X', now: NOW }).code
        : undefined;
    };
    expect(answer('|||ER|AL', 'accept')).toBe('AA');
    expect(answer('|||ER|SU', 'accept')).toBe('AA');
    expect(answer('|||ER|AL', 'error')).toBe('CE');
    expect(answer('|||ER|ER', 'accept')).toBeUndefined();
    expect(answer('|||SU|AL', 'error')).toBe('AE');
    expect(answer('|||SU|ER', 'reject')).toBe('AR');
    expect(answer('|||SU|AL', 'accept')).toBe('CA');
    expect(answer('|||SU|SU', 'error')).toBeUndefined();
    expect(answer('|||ER|', 'accept')).toBeUndefined();
    expect(answer('|||AL|ER', 'accept')).toBe('CA');
  });

  it('honours MSH-15 accept acknowledgment conditions (table 0155)', () => {
    const wanted = (type: string, outcome: 'accept' | 'error') =>
      acceptAckWanted(parseHl7(inbound('2.5.1', `|||${type}`)), outcome);
    expect(wanted('AL', 'accept')).toBe(true);
    expect(wanted('NE', 'error')).toBe(false);
    expect(wanted('ER', 'accept')).toBe(false);
    expect(wanted('ER', 'error')).toBe(true);
    expect(wanted('SU', 'accept')).toBe(true);
    expect(wanted('SU', 'error')).toBe(false);
  });

  it('answers in the inbound charset (MSH-18 8859/1 → Latin-1 bytes)', () => {
    const text = inbound('2.4', '||||||8859/1');
    const ack = buildAck({
      inbound: parseHl7(Buffer.from(text, 'latin1')),
      outcome: 'error',
      errors: [{ code: 207, severity: 'E', message: 'Fehler in Schnittstelle: Gerät' }],
      controlId: 'OUT-4',
      now: NOW,
    });
    expect(ack.text).toContain('|8859/1');
    expect(ack.bytes.includes(Buffer.from('Ger\u00e4t', 'latin1'))).toBe(true);
    expect(parseHl7(ack.bytes).get('MSA-3')).toBe('Fehler in Schnittstelle: Gerät');
  });
});

describe('the bytes of an ACK are those its MSH-18 names', () => {
  const ackOf = (raw: Buffer) =>
    buildAck({ inbound: parseHl7(raw), outcome: 'accept', controlId: 'OUT-1', now: NOW });
  const withSender = (name: string, charset: string) =>
    inbound('2.5.1', `||||||${charset}`).replace('RIS^1.2.3^ISO', name);

  it('a name read in GB 18030 (no encoder here) goes back in UTF-8 under UNICODE UTF-8', () => {
    // 放射科 in GB 18030 bytes, as a Chinese RIS writes its department
    const gb = Buffer.from(withSender('RIS_\u0000', 'GB 18030-2000'), 'latin1');
    const at = gb.indexOf(0);
    const raw = Buffer.concat([
      gb.subarray(0, at),
      Buffer.from('b7c5c9e4bfc6', 'hex'),
      gb.subarray(at + 1),
    ]);
    const ack = ackOf(raw);
    expect(ack.text.split('\r')[0]).toMatch(/\|UNICODE UTF-8$/);
    expect(isValidUtf8(ack.bytes)).toBe(true);
    expect(parseHl7(ack.bytes).get('MSH-5')).toBe('RIS_放射科');
  });

  it("an ASCII answer keeps the sender's MSH-18 as the table spells it", () => {
    expect(ackOf(Buffer.from(withSender('RIS', 'GB 18030-2000'))).text).toContain(
      '|GB 18030-2000\r',
    );
    expect(ackOf(Buffer.from(withSender('RIS', ''))).text.split('\r')[0]).toMatch(/\|2\.5\.1$/);
  });

  it('v2.3/v2.4 name UTF-8 UNICODE, their table having no UNICODE UTF-8', () => {
    const raw = Buffer.from(inbound('2.4').replace('RIS^1.2.3^ISO', 'RÖNTGEN'), 'utf8');
    const ack = ackOf(raw);
    expect(ack.text.split('\r')[0]).toMatch(/\|UNICODE$/);
    expect(parseHl7(ack.bytes).get('MSH-5')).toBe('RÖNTGEN');
  });
});

describe('checkStructure', () => {
  const check = (text: string, allowed = ['P']) =>
    checkStructure(parseHl7(text), { allowedProcessingIds: allowed });

  it('accepts supported orders and ADT events', () => {
    expect(check(inbound('2.5.1')).outcome).toBe('accept');
    expect(check(inbound('2.3'))).toEqual({ outcome: 'accept', errors: [] });
  });

  it.each([
    ['ORU^R01', 200, 'MSH-9.1'],
    ['ORM^O02', 201, 'MSH-9.2'],
    ['ADT^A01', 201, 'MSH-9.2'],
  ])('rejects %s with AR %i', (type, code, location) => {
    const result = check(inbound('2.5.1').replace('ORM^O01^ORM_O01', type));
    expect(result.outcome).toBe('reject');
    expect(result.errors).toEqual([expect.objectContaining({ code, location, severity: 'E' })]);
  });

  it('rejects a processing ID not configured (AR 202) and accepts configured ones', () => {
    const training = inbound('2.5.1').replace('|P|2.5.1', '|T|2.5.1');
    expect(check(training).errors).toEqual([expect.objectContaining({ code: 202 })]);
    expect(check(training, ['P', 'T']).outcome).toBe('accept');
  });

  it.each(['2.2', '2.9', '3.0'])('rejects version %s with AR 203', (version) => {
    expect(check(inbound(version)).errors).toEqual([
      expect.objectContaining({ code: 203, location: 'MSH-12' }),
    ]);
  });

  it('takes a message without control ID with a warning (it is keyed by content instead)', () => {
    const result = check(inbound('2.5.1').replace('|IN-42|', '||'));
    expect(result).toEqual({
      outcome: 'accept',
      errors: [expect.objectContaining({ code: 101, location: 'MSH-10', severity: 'W' })],
    });
  });

  it('quotes a header code in its refusal by its first 20 characters at most', () => {
    const long = 'Z'.repeat(5000);
    for (const edit of [
      (t: string) => t.replace('ORM^O01^ORM_O01', `${long}^O01`),
      (t: string) => t.replace('ORM^O01^ORM_O01', `ORM^${long}`),
      (t: string) => t.replace('|P|2.5.1', `|${long}|2.5.1`),
      (t: string) => t.replace('|P|2.5.1', `|P|${long}`),
    ]) {
      const [error] = check(edit(inbound('2.5.1'))).errors;
      expect(error!.message).toContain(`${'Z'.repeat(20)}…`);
      expect(error!.message).not.toContain('Z'.repeat(21));
    }
  });

  it('rejects an MSH-10 over 199 characters (ST) with AR 102 at MSH-10', () => {
    expect(check(inbound('2.5.1').replace('IN-42', '7'.repeat(199))).outcome).toBe('accept');
    expect(check(inbound('2.5.1').replace('IN-42', '7'.repeat(200)))).toEqual({
      outcome: 'reject',
      errors: [expect.objectContaining({ code: 102, location: 'MSH-10', severity: 'E' })],
    });
  });

  it('answers AE 100 for an order message without ORC/OBR', () => {
    const result = check(inbound('2.5.1').replace('ORC|NW|P1\rOBR|1|P1||CT1^CT Head^L\r', ''));
    expect(result.outcome).toBe('error');
    expect(result.errors[0].code).toBe(100);
  });

  it('warns about an unknown charset and a missing MSH-7 without rejecting', () => {
    const text = inbound('2.5.1', '||||||ISO IR87').replace('|20240318144217|', '||');
    const result = check(text);
    expect(result.outcome).toBe('accept');
    expect(result.errors.map((e) => [e.location, e.severity])).toEqual([
      ['MSH-7', 'W'],
      ['MSH-18', 'W'],
    ]);
  });
});

/**
 * MSH-5/MSH-6 of the ACK are the sender's MSH-3/MSH-4 whole (v2.5.1 §2.9.2: the responding
 * system swaps them), every HD component and subcomponent: IHE-profiled senders name themselves
 * by OID (`EPIC^1.2.840.114350.1.13.99^ISO`, as the v2.8 order of
 * test/fixtures/hl7/omi-o23-v28-multi-order.hl7), some write the HD with subcomponents
 * (`RIS&1.2.3.4&ISO`), and with other encoding characters they come back in the sender's own.
 */
describe('buildAck echoes MSH-3/MSH-4 whole', () => {
  it.each([
    ['|^~\\&', 'RIS&1.2.3.4&ISO', 'HOSP^2.16.840.1.113883.3.1^ISO'],
    ['|^~\\&#', 'EPIC^1.2.840.114350.1.13.99^ISO', 'NORTH\\T\\WEST^1.2.3^ISO'],
    ['|!~\\&', 'RIS!1.2.3.4!ISO', 'A\\S\\B&x&L!1.2!ISO'],
  ])('MSH-1/2 %s, MSH-3 %s, MSH-4 %s', (enc, app, facility) => {
    const type = enc.startsWith('|!') ? 'ORM!O01!ORM_O01' : 'ORM^O01^ORM_O01';
    const ack = buildAck({
      inbound: parseHl7(
        `MSH${enc}|${app}|${facility}|AI|RAD|20240318144217||${type}|IN-42|P|2.5.1\rPID|1||A1\r`,
      ),
      outcome: 'accept',
      controlId: 'OUT-1',
      now: NOW,
    });
    const fields = ack.text.split('\r')[0].split('|');
    expect(fields[2]).toBe('AI');
    expect([fields[4], fields[5]]).toEqual([app, facility]);
  });
});

describe('MSA-2', () => {
  // v2.5.1 §2.9.2: MSA-2 is the MSH-10 of the message acknowledged, exactly as sent.
  it.each(['IN-42', '20240318^0001', 'MSG&7', 'A\\F\\B'])('echoes MSH-10 %s whole', (id) => {
    const ack = buildAck({
      inbound: parseHl7(inbound('2.5.1').replace('IN-42', id)),
      outcome: 'accept',
      controlId: 'OUT-1',
      now: NOW,
    });
    expect(ack.text.split('\r')[1]).toBe(`MSA|AA|${id}`);
  });
});

describe('MSA-2 holds what an ST holds', () => {
  const msa2 = (id: string) =>
    buildAck({
      inbound: parseHl7(Buffer.from(inbound('2.5.1').replace('IN-42', id), 'latin1')),
      outcome: 'accept',
      controlId: 'OUT-1',
      now: NOW,
    })
      .text.split('\r')[1]!
      .slice('MSA|AA|'.length);

  it.each([
    // a sender that does not escape its backslashes: read as text, written \E\
    ['AB\\CD', 'AB\\E\\CD'],
    ['AB\\C^D\\', 'AB\\E\\C^D\\E\\'],
    // a control character, raw or inside what would be a sequence, as hexadecimal data
    ['ID\x01', 'ID\\X01\\'],
    ['\\X\x0bA\\', '\\E\\X\\X0B\\A\\E\\'],
    // escapes the sender closed stay as written
    ['A\\F\\B\\X41\\', 'A\\F\\B\\X41\\'],
  ])('MSH-10 %j is answered %j', (id, written) => {
    expect(msa2(id)).toBe(written);
  });

  it('is at most 199 characters, never cut inside an escape sequence', () => {
    expect(msa2('9'.repeat(300))).toBe('9'.repeat(199));
    expect(msa2(`${'9'.repeat(197)}\\F\\99`)).toBe('9'.repeat(197));
  });
});

describe('MSH-3..6 of the ACK hold what an HD holds', () => {
  it('an HD over 227 characters is not echoed (MSH-3 then names us)', () => {
    const long = 'R'.repeat(228);
    const ack = buildAck({
      inbound: parseHl7(
        inbound('2.5.1').replace('|RIS^1.2.3^ISO|HOSP|AI|', `|${long}|HOSP|${long}|`),
      ),
      outcome: 'reject',
      errors: [{ location: 'MSH-3', code: 102, severity: 'E', message: 'too long' }],
      controlId: 'OUT-1',
      now: NOW,
    });
    expect(ack.text.split('\r')[0]!.split('|').slice(2, 6)).toEqual([
      'IMAGING-AI-ADAPTER',
      'RAD',
      '',
      'HOSP',
    ]);
  });
});

describe('MSH-3 of the ACK', () => {
  // Senders often leave MSH-5/MSH-6 empty (interface-engine samples such as
  // `MSH|^~\&|EPIC|EPICADT|||…`): the ACK still names us in MSH-3.
  it.each([
    ['', 'IMAGING-AI-ADAPTER'],
    ['AI', 'AI'],
    ['AI^1.2.3^ISO', 'AI^1.2.3^ISO'],
  ])('inbound MSH-5 %j gives MSH-3 %s', (msh5, msh3) => {
    const ack = buildAck({
      inbound: parseHl7(inbound('2.5.1').replace('|HOSP|AI|RAD|', `|HOSP|${msh5}||`)),
      outcome: 'accept',
      controlId: 'OUT-1',
      now: NOW,
    });
    expect(ack.text.split('|')[2]).toBe(msh3);
  });
});
