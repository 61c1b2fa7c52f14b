import { parseHl7 } from '../hl7/hl7-message';
import type { PublicationInput } from './publication.model';
import { encodeField, encodeSegment } from '../hl7/hl7-builder';
import { fillerNumberOf, msh, pidOf, placerNumberOf, pv1Of } from './hl7-result.segments';

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

/**
 * A sender's PID/PV1 carried into our ORU are written with OUR delimiters (MSH-2 `^~\&`, no
 * truncation character): their escapes must mean in our message what they meant in the order.
 * Modelled on the v2.8 EHR order of test/fixtures/hl7/omi-o23-v28-multi-order.hl7 (MSH-2
 * `^~\&#`, where a US street address `Apt #4F` must be written `Apt \P\4F`), and on a sender
 * using other encoding characters, which v2.5.1 §2.5.4 allows (`|!~\&`: `!` separates
 * components and `^` is text).
 */
describe('PID/PV1 of an order with other encoding characters', () => {
  const input = {} as PublicationInput;

  it('writes the v2.7+ truncation escape \\P\\ as the character it stands for', () => {
    const order = parseHl7(
      'MSH|^~\\&#|EPIC^1.2.840.114350.1.13.99^ISO|NW|AI|RAD|20260112161722-0500||OMI^O23^OMI_O23|8817261|P|2.8\r' +
        'PID|1||E4410029^^^EPI^MR~100000219^^^&2.16.840.1.113883.4.1&ISO^SS||NGUYEN^THANH||19710305|M|||118-22 Queens Blvd^Apt \\P\\4F^Forest Hills\r' +
        'PV1|1|E|ED^^^NSUH\r' +
        'ORC|NW|556071^EPC\r',
    );
    expect(pidOf(input, order)).toBe(
      'PID|1||E4410029^^^EPI^MR~100000219^^^&2.16.840.1.113883.4.1&ISO^SS||NGUYEN^THANH||19710305|M|||118-22 Queens Blvd^Apt #4F^Forest Hills',
    );
  });

  it('transcodes a PID and PV1 written with `!` as component separator, keeping both', () => {
    const order = parseHl7(
      'MSH|!~\\&|RIS|H|AI|H|20240318144217||ORM!O01|C1|P|2.3.1\r' +
        "PID|||PAT-4711!!!HOSPA&1.2.3&ISO!MR~998877!!!SSA!SS||O'NEIL^SMITH\\F\\X!ANN\\S\\MARIE||19560214|F\r" +
        'PV1||I|3W!301!A\r' +
        'ORC|NW|PLC-1!RIS\r',
    );
    expect(pidOf(input, order)).toBe(
      "PID|||PAT-4711^^^HOSPA&1.2.3&ISO^MR~998877^^^SSA^SS||O'NEIL\\S\\SMITH\\F\\X^ANN!MARIE||19560214|F",
    );
    expect(pv1Of(order)).toBe('PV1||I|3W^301^A');
  });
});

describe('MSH-5/MSH-6 of our ORU', () => {
  const settings = {
    sendingApplication: 'IMAGING-AI-ADAPTER',
    sendingFacility: 'AI',
    defaultVersion: '2.5.1',
    textType: 'TX' as const,
  };

  it.each([
    ['EPIC^1.2.840.114350.1.13.99^ISO', 'EPIC^1.2.840.114350.1.13.99^ISO'],
    ['RIS&1.2.3.4&ISO', 'RIS&1.2.3.4&ISO'],
  ])('echo the order MSH-3 %s whole', (sent, echoed) => {
    const order = parseHl7(
      `MSH|^~\\&|${sent}|NORTHWELL^2.16.840.1.113883.3.1^ISO|AI|RAD|2026||ORM^O01|C1|P|2.5.1\rPID|||1\r`,
    );
    const head = encodeSegment(msh(order, settings, 'ORU', 'X1', new Date(0)).spec);
    expect(head.split('|').slice(4, 6)).toEqual([echoed, 'NORTHWELL^2.16.840.1.113883.3.1^ISO']);
  });
});

/**
 * MSH-18 of our ORU is a value of table 0211 (ID), however the order spelled its charset:
 * interface engines write `UTF-8` or `utf-8`, DICOM-side engines the defined terms `ISO_IR 192`
 * and `ISO_IR 100` (PS3.3 C.12.1.1.2), hand-configured senders lowercase table values.
 */
describe('MSH-18 of our ORU', () => {
  const settings = {
    sendingApplication: 'IAA',
    sendingFacility: 'AI',
    defaultVersion: '2.5.1',
    textType: 'TX' as const,
  };
  it.each([
    ['UTF-8', '2.5.1', 'UNICODE UTF-8'],
    ['utf-8', '2.5.1', 'UNICODE UTF-8'],
    ['unicode utf-8', '2.5.1', 'UNICODE UTF-8'],
    ['ISO_IR 192', '2.5.1', 'UNICODE UTF-8'],
    ['UTF-8', '2.4', 'UNICODE'],
    ['ISO_IR 100', '2.5.1', '8859/1'],
    ['8859/1', '2.5.1', '8859/1'],
    ['ISO-8859-2', '2.3.1', '8859/2'],
    ['CP1250', '2.3', 'CP1250'],
  ])('an order declaring %s (v%s) is answered with MSH-18 %s', (sent, version, written) => {
    const order = parseHl7(
      `MSH|^~\\&|RIS|H|AI|RAD|2026||ORM^O01|C1|P|${version}||||||${sent}\rPID|||1\r`,
    );
    const head = encodeSegment(msh(order, settings, 'ORU', 'X1', new Date(0)).spec);
    expect(head.split('|')[17]).toBe(written);
  });
});

/**
 * ORC-2/ORC-3/OBR-2/OBR-3 of our ORU echo the order's placer and filler numbers as the RIS
 * sent them, the whole EI (v2.5.1 2A.3.24: entity ID ^ namespace ID ^ universal ID ^ type).
 * Modelled on the IHE RAD-4 OMI^O23 of test/fixtures/hl7/omi-o23-v251-nir-before-pi.hl7, where
 * the French extension names the issuer of each number by OID: the placer number with
 * namespace and OID, the filler number (DICOM Accession-style RIS number) with its OID only.
 */
describe('placer and filler numbers of our ORU', () => {
  const order = parseHl7(
    'MSH|^~\\&|RIS|CHU|AI|RAD|20260301101500+0100||OMI^O23^OMI_O23|F1|P|2.5.1\r' +
      'PID|1||990012^^^CHU&1.2.250.1.999.1&ISO^PI\r' +
      'ORC|NW|PLC-100234^RADIS1^1.2.250.1.999.1.2^ISO|FIL-55012^^1.2.250.1.999.2^ISO\r' +
      'OBR|1|PLC-100234^RADIS1^1.2.250.1.999.1.2^ISO|FIL-55012^^1.2.250.1.999.2^ISO|24590-2^MR Brain^LN\r',
  );
  // what the order model keeps of them (namespace, else universal ID, as the "system")
  const input = {
    orderId: '0b7f3c52-4a51-4e8e-9c63-5d3f1e2a7a10',
    order: {
      placerOrderNumber: 'PLC-100234',
      fillerOrderNumber: 'FIL-55012',
      request: {
        placerOrderNumber: { value: 'PLC-100234', system: 'RADIS1' },
        fillerOrderNumber: { value: 'FIL-55012', system: '1.2.250.1.999.2' },
      },
    },
  } as unknown as PublicationInput;

  it('are the EIs the order sent, namespace, universal ID and type', () => {
    expect(encodeField(placerNumberOf(input, order))).toBe(
      'PLC-100234^RADIS1^1.2.250.1.999.1.2^ISO',
    );
    expect(encodeField(fillerNumberOf(input, order))).toBe('FIL-55012^^1.2.250.1.999.2^ISO');
  });

  it('without the order message, are built from the model as before', () => {
    expect(encodeField(placerNumberOf(input))).toBe('PLC-100234^RADIS1');
  });

  it('an EI longer than an EI holds (427) goes back as its number alone', () => {
    const ns = 'N'.repeat(3000);
    const long = parseHl7(
      'MSH|^~\\&|RIS|CHU|AI|RAD|20260301101500+0100||OMI^O23^OMI_O23|F1|P|2.5.1\r' +
        'PID|1||990012^^^CHU^PI\r' +
        `ORC|NW|PLC-100234^${ns}^1.2.3^ISO\rOBR|1|PLC-100234^${ns}^1.2.3^ISO\r`,
    );
    const withLongSystem = {
      ...input,
      order: {
        ...input.order,
        request: { ...input.order.request, placerOrderNumber: { value: 'PLC-100234', system: ns } },
      },
    } as unknown as PublicationInput;
    // before: the 3,000-character namespace in ORC-2 and OBR-2 of the ORU
    expect(encodeField(placerNumberOf(input, long))).toBe('PLC-100234');
    expect(encodeField(placerNumberOf(withLongSystem))).toBe('PLC-100234');
  });
});

describe('MSH-11 of our ORU', () => {
  const settings = {
    sendingApplication: 'IMAGING-AI-ADAPTER',
    sendingFacility: 'AI',
    defaultVersion: '2.5.1',
    textType: 'TX' as const,
  };
  const processingId = (sent: string | undefined) =>
    encodeSegment(
      msh(
        sent === undefined
          ? undefined
          : parseHl7(`MSH|^~\\&|RIS|H|AI|RAD|2026||ORM^O01|C1|${sent}|2.5.1\rPID|||1\r`),
        settings,
        'ORU',
        'X1',
        new Date(0),
      ).spec,
    ).split('|')[10];

  // A RIS's test system sends T (table 0103; accepted with HL7_PROCESSING_IDS=P,T while a
  // site connects to the sandbox): the results of its test orders must not come back as P.
  it.each([
    ['T', 'T'],
    ['P', 'P'],
    ['D', 'D'],
    ['P^T', 'P^T'],
    [undefined, 'P'],
  ])('is the order MSH-11 %s', (sent, written) => {
    expect(processingId(sent)).toBe(written);
  });
});

/**
 * PID-8 of our ORU is a table 0001 code whatever the order held: the v2.3 US RIS of
 * test/fixtures/hl7/orm-o01-v23-lf-bom-escapes.hl7 writes `female` (accepted at intake as the
 * quirk free-text sex), German feeds write `W` (weiblich).
 */
describe('PID-8 of our ORU', () => {
  const pid8 = (sent: string, sex?: string) =>
    pidOf(
      { order: { request: { patient: { identifiers: [], sex } } } } as unknown as PublicationInput,
      parseHl7(
        `MSH|^~\\&|RIS|H|AI|H|2009||ORM^O01|C1|P|2.3\rPID|1||20056^^^ST_MARY^MR||O'BRIEN^MARGARET||19480923|${sent}|||22 Harbour Rd|\rORC|NW|1\r`,
      ),
    ).split('|')[8];

  it.each([
    ['female', 'female', 'F'],
    ['W', 'female', 'F'],
    ['MALE', 'male', 'M'],
    ['xyz', undefined, ''],
    ['F', 'female', 'F'],
    // A (ambiguous) is read as other at intake: the sender's own code stays
    ['A', 'other', 'A'],
    // an ADT^A08 corrected the order's sex after it came
    ['F', 'male', 'M'],
    ['', undefined, ''],
  ])('%s (read as %s) is written %j', (sent, sex, written) => {
    expect(pid8(sent, sex)).toBe(written);
  });
});

/**
 * PID-5 of our ORU for an order that came over FHIR (no HL7 PID to echo): an XPN with the
 * name's suffix (XPN.4) and prefix (XPN.5), v2.5.1 2A.3.88. Before, they were dropped: the
 * RIS got `Smith^John` for both John Smith Jr. and his father, whose orders it matches by name.
 */
describe('PID-5 of our ORU for a FHIR order', () => {
  const pid5 = (name: Record<string, unknown>) =>
    pidOf(
      {
        order: { request: { patient: { identifiers: [{ value: 'P-1', system: 'HOSP' }], name } } },
      } as unknown as PublicationInput,
      undefined,
    ).split('|')[5];

  it('family ^ given ^ further given names ^ suffix ^ prefix', () => {
    expect(
      pid5({ family: 'Smith', given: ['John', 'Paul', 'George'], suffix: 'Jr.', prefix: 'Dr.' }),
    ).toBe('Smith^John^Paul George^Jr.^Dr.');
    expect(pid5({ family: 'Smith', given: ['John'], suffix: 'III' })).toBe('Smith^John^^III');
    expect(pid5({ family: 'Nguyễn', given: ['Thị'] })).toBe('Nguyễn^Thị');
  });
});
