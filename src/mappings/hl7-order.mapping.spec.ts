import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

import { decideCharset, decodeBytes } from '../hl7/hl7-charset';
import { parseHl7 } from '../hl7/hl7-message';
import { QuirkCollector } from '../hl7/hl7-quirk';
import {
  applyDataMinimisation,
  DEFAULT_HL7_ORDER_MAPPING_CONFIG,
  Hl7OrderMappingConfig,
} from './hl7-order.config';
import { evaluateInboundHl7 } from './hl7-inbound.evaluator';
import { HL7_ORDER_FIELD_MAP, mapHl7Message } from './hl7-order.mapping';

const FIXTURES = path.join(__dirname, '../../test/fixtures/hl7');
const EXPECTED = path.join(FIXTURES, 'expected');
const NOW = new Date('2026-01-01T12:00:00Z');

function fixture(name: string): Buffer {
  return readFileSync(path.join(FIXTURES, name));
}

/** A fixture with one piece of its text replaced, mapped with the default config. */
function mapEdited(name: string, from: string, to: string) {
  const bytes = fixture(name);
  const { encoding } = decideCharset(bytes, new QuirkCollector()); // as MSH-18 declares
  return mapHl7Message(parseHl7(decodeBytes(bytes, encoding).replace(from, to)));
}

/** Everything the adapter decides for one fixture, in a stable JSON shape. */
function evaluate(name: string, config: Hl7OrderMappingConfig) {
  const result = evaluateInboundHl7({
    bytes: fixture(name),
    mappingConfig: config,
    structureOptions: { allowedProcessingIds: ['P', 'T'] },
    ackControlId: 'ACK-0001',
    now: NOW,
  });
  if (result.kind !== 'evaluated') throw result.error;
  return {
    fixture: name,
    outcome: result.outcome,
    ackCode: result.ack.code,
    ack: result.ack.text.split('\r').filter((l) => l !== ''),
    errors: result.errors,
    mappingVersion: result.mapping?.mappingVersion,
    quirks: result.mapping?.quirks ?? result.message.quirks,
    orders: result.mapping?.orders ?? [],
    patientEvents: result.mapping?.patientEvents ?? [],
  };
}

const CASES: { name: string; golden: string; config: Hl7OrderMappingConfig }[] = readdirSync(
  FIXTURES,
)
  .filter((f) => f.endsWith('.hl7'))
  .sort()
  .map((f) => ({
    name: f,
    golden: f.replace(/\.hl7$/, '.json'),
    config: DEFAULT_HL7_ORDER_MAPPING_CONFIG,
  }));
CASES.push({
  name: 'orm-o01-v231-unknown-procedure.hl7',
  golden: 'orm-o01-v231-unknown-procedure.default-products.json',
  config: {
    ...DEFAULT_HL7_ORDER_MAPPING_CONFIG,
    unknownProcedure: { kind: 'default-products', products: ['general-triage'] },
  },
});

describe('HL7 order mapping golden files (test/fixtures/hl7/expected)', () => {
  it.each(CASES)('$golden', ({ name, golden, config }) => {
    const actual = JSON.parse(JSON.stringify(evaluate(name, config)));
    const file = path.join(EXPECTED, golden);
    // UPDATE_GOLDEN=1 rewrites the files; review the diff before committing.
    if (process.env.UPDATE_GOLDEN === '1' || !existsSync(file)) {
      writeFileSync(file, `${JSON.stringify(actual, null, 2)}\n`);
    }
    expect(actual).toEqual(JSON.parse(readFileSync(file, 'utf8')));
  });

  it('has a golden file for every fixture', () => {
    for (const f of readdirSync(FIXTURES).filter((x) => x.endsWith('.hl7'))) {
      expect(existsSync(path.join(EXPECTED, f.replace(/\.hl7$/, '.json')))).toBe(true);
    }
  });
});

describe('mapHl7Message rules', () => {
  it('is deterministic', () => {
    const a = mapHl7Message(parseHl7(fixture('omi-o23-v28-multi-order.hl7')));
    const b = mapHl7Message(parseHl7(fixture('omi-o23-v28-multi-order.hl7')));
    expect(a).toEqual(b);
  });

  it('reads the accession number in the configured source order', () => {
    const message = parseHl7(fixture('orm-o01-v231-ihe-swf-zds.hl7'));
    const byObr = mapHl7Message(message);
    expect(byObr.orders[0].request.accessionNumber).toBe('ACC-20240318-0042');
    const byFiller = mapHl7Message(message, {
      ...DEFAULT_HL7_ORDER_MAPPING_CONFIG,
      accessionSources: ['ORC-3', 'OBR-18'],
    });
    expect(byFiller.orders[0].request.accessionNumber).toBe('FIL-55012');
    expect(byFiller.orders[0].lineage).toContainEqual({
      target: 'accessionNumber',
      source: 'ORC-3',
      value: 'FIL-55012',
      ruleId: 'hl7.order.accession',
    });
  });

  it('takes off the spaces a fixed-width sender pads identifiers with (accession, PID-3, placer, filler)', () => {
    const lines = fixture('orm-o01-v231-ihe-swf-zds.hl7').toString('latin1').split('\r');
    const padded = lines
      .join('\r')
      .replace('PAT-4711^^^HOSPA^MR', 'PAT-4711   ^^^HOSPA ^MR')
      .split('PLC-100234^RADIS1')
      .join('PLC-100234  ^RADIS1')
      .split('FIL-55012^DSS_OF')
      .join(' FIL-55012^DSS_OF')
      .replace('|ACC-20240318-0042|', '|  ACC-20240318-0042    |');
    const result = mapHl7Message(parseHl7(padded));
    const { request, lineage } = result.orders[0];
    expect(request.accessionNumber).toBe('ACC-20240318-0042');
    expect(request.placerOrderNumber).toEqual({ value: 'PLC-100234', system: 'RADIS1' });
    expect(request.fillerOrderNumber).toEqual({ value: 'FIL-55012', system: 'DSS_OF' });
    expect(request.patient.identifiers[0]).toEqual({
      value: 'PAT-4711',
      system: 'HOSPA',
      type: 'MR',
    });
    expect(lineage).toContainEqual(
      expect.objectContaining({ target: 'accessionNumber', value: 'ACC-20240318-0042' }),
    );
    // only spaces are padding: a space-only accession is no accession
    const blank = mapHl7Message(parseHl7(padded.replace('|  ACC-20240318-0042    |', '|   |')));
    expect(blank.orders[0].request.accessionNumber).toBeUndefined();
  });

  it('falls back from ORC-2 to OBR-2 for the placer order number', () => {
    const result = mapEdited(
      'orm-o01-v231-ihe-swf-zds.hl7',
      'ORC|NW|PLC-100234^RADIS1|',
      'ORC|NW||',
    );
    expect(result.orders[0].request.placerOrderNumber).toEqual({
      value: 'PLC-100234',
      system: 'RADIS1',
    });
    expect(result.orders[0].lineage).toContainEqual(
      expect.objectContaining({ target: 'placerOrderNumber.value', source: 'OBR-2.1' }),
    );
  });

  it('locates errors in the right order group', () => {
    const result = mapEdited('omi-o23-v28-multi-order.hl7', 'ORC|NW|556072', 'ORC|ZZ|556072');
    expect(result.outcome).toBe('error');
    expect(result.errors).toEqual([
      expect.objectContaining({ location: 'ORC[2]-1', code: 103, severity: 'E' }),
    ]);
    expect(result.orders.map((o) => o.groupIndex)).toEqual([1]);
  });

  it('never fails a cancel on an unknown procedure code', () => {
    const result = mapEdited(
      'orm-o01-v251-cancel-ca.hl7',
      '24627-2^CT Chest^LN',
      'ZZ999^Unknown^L',
    );
    expect(result.outcome).toBe('accept');
    expect(result.orders[0].request.products).toEqual([]);
  });

  it('answers AE 101 at MRG-1 for a merge without prior identifier', () => {
    const result = mapEdited('adt-a40-v251-merge.hl7', 'MRG|PAT-9902^^^HOSPA^MR|', 'MRG||');
    expect(result.patientEvents).toEqual([]);
    expect(result.errors).toEqual([expect.objectContaining({ location: 'MRG-1', code: 101 })]);
  });

  it('keeps an invalid birth date out and warns (AE not needed)', () => {
    const result = mapEdited('orm-o01-v231-ihe-swf-zds.hl7', '19560214', '19561340');
    expect(result.outcome).toBe('accept');
    expect(result.orders[0].request.patient.birthDate).toBeUndefined();
    expect(result.errors).toEqual([
      expect.objectContaining({ location: 'PID-7', code: 102, severity: 'W' }),
    ]);
    expect(result.quirks.map((q) => q.code)).toContain('invalid-date');
  });

  it('keeps a timestamp in year 0000 (no ISO 8601 / R4 year) out of requestedAt', () => {
    // it reached the DiagnosticReport's effectiveDateTime, which our validation then refused
    const result = mapEdited(
      'orm-o01-v231-ihe-swf-zds.hl7',
      '|^^^20240318150000^^R|',
      '|^^^00000318150000^^R|',
    );
    expect(result.orders[0].request.requestedAt).toBe('2024-03-18T15:00:00+00:00'); // OBR-27.4
    expect(result.quirks.map((q) => q.code)).toContain('invalid-date');
  });

  it('reads a time sent without offset in the zone MSH-7 names (the sender local time)', () => {
    // Dutch Epic-style ORM v2.4: MSH-7 20260312081502+0100, ORC-7.4 / OBR-27.4 09:15 without
    // offset. Before: 2026-03-12T09:15:00+00:00, an hour late (OBR-7 of the ORU, the report).
    const bytes = fixture('orm-o01-v24-nl-msh7-offset.hl7');
    const nl = mapHl7Message(parseHl7(bytes), {
      ...DEFAULT_HL7_ORDER_MAPPING_CONFIG,
      senderUtcOffset: '+02:00', // a fixed site offset is wrong across DST: MSH-7 says which
    }).orders[0];
    expect(nl.request.requestedAt).toBe('2026-03-12T09:15:00+01:00');
    expect(nl.lineage).toContainEqual(
      expect.objectContaining({
        target: 'requestedAt',
        source: 'ORC-7.4',
        rule: 'HL7 DTM, sender offset +01:00 (MSH-7): 20260312091500 → 2026-03-12T09:15:00+01:00',
      }),
    );
    // Without an offset in MSH-7 either, the site's configured offset applies, as before.
    const noOffset = mapEdited(
      'orm-o01-v24-nl-msh7-offset.hl7',
      '20260312081502+0100',
      '20260312081502',
    );
    expect(noOffset.orders[0].request.requestedAt).toBe('2026-03-12T09:15:00+00:00');
    // An offset that cannot be one (+2500) says nothing about the zone.
    const bad = mapEdited('orm-o01-v24-nl-msh7-offset.hl7', '081502+0100', '081502+2500');
    expect(bad.orders[0].request.requestedAt).toBe('2026-03-12T09:15:00+00:00');
  });

  it('reads a time without offset in the configured sender time zone, on its own date', () => {
    // The Dutch ORM sent the evening before summer time began (MSH-7 +0100) for an exam the
    // Monday after (09:15 local, CEST): MSH-7's offset made it 09:15+01:00, an hour late.
    const edit = (text: string) =>
      text
        .replace('20260312081502+0100', '20260328221502+0100')
        .replace(/\^\^\^20260312091500\^\^R/g, '^^^20260330091500^^R');
    const bytes = edit(fixture('orm-o01-v24-nl-msh7-offset.hl7').toString('latin1'));
    const msh7 = mapHl7Message(parseHl7(bytes)).orders[0];
    expect(msh7.request.requestedAt).toBe('2026-03-30T09:15:00+01:00');
    const zoned = mapHl7Message(parseHl7(bytes), {
      ...DEFAULT_HL7_ORDER_MAPPING_CONFIG,
      senderTimeZone: 'Europe/Amsterdam',
    }).orders[0];
    expect(zoned.request.requestedAt).toBe('2026-03-30T09:15:00+02:00');
    expect(zoned.lineage).toContainEqual(
      expect.objectContaining({
        target: 'requestedAt',
        source: 'ORC-7.4',
        rule: 'HL7 DTM, sender time zone Europe/Amsterdam (+02:00): 20260330091500 → 2026-03-30T09:15:00+02:00',
      }),
    );
    // a time with its own offset keeps it whatever the zone
    const own = mapHl7Message(
      parseHl7(bytes.replace(/\^\^\^20260330091500\^\^R/g, '^^^20260330091500+0000^^R')),
      {
        ...DEFAULT_HL7_ORDER_MAPPING_CONFIG,
        senderTimeZone: 'Europe/Amsterdam',
      },
    ).orders[0];
    expect(own.request.requestedAt).toBe('2026-03-30T09:15:00+00:00');
  });

  it('maps a change sent as the ORC alone (ORM_O01 order detail omitted): no procedure, no products asked', () => {
    // Before: AE 101 "Requested procedure code missing" at OBR-4, a segment the XO did not have.
    const text = fixture('orm-o01-v251-change-xo.hl7').toString('latin1');
    const orcOnly = text
      .split('\r')
      .filter((l) => !/^(OBR|ZDS)\|/.test(l))
      .join('\r');
    const result = mapHl7Message(parseHl7(orcOnly));
    expect(result.errors).toEqual([]);
    expect(result.orders[0].request).toMatchObject({
      action: 'update',
      priority: 'stat',
      requestedAt: '2024-03-18T15:30:00+00:00',
    });
    expect(result.orders[0].request.products).toBeUndefined();
    expect(result.orders[0].request.procedure).toBeUndefined();
    // A new order still needs its procedure.
    const nw = mapHl7Message(parseHl7(orcOnly.replace('\rORC|XO|', '\rORC|NW|')));
    expect(nw.errors).toEqual([
      expect.objectContaining({ code: 100, severity: 'E', location: 'ORC-1' }),
    ]);
  });

  it('reads ORC-1 XX (order changed by the filler, unsolicited) as a change, as OC is a cancel', () => {
    // Before: AE 103 "Order control XX (HL7 table 0119) is not acted on here".
    const result = mapEdited('orm-o01-v251-change-xo.hl7', '\rORC|XO|', '\rORC|XX|');
    expect(result.errors).toEqual([]);
    expect(result.orders[0].request).toMatchObject({ action: 'update', priority: 'stat' });
  });

  it('reads the ordering provider of a v2.7+ order from its PRT (PRT-4 OP) when ORC-12 and OBR-16 are empty', () => {
    // Before: no ordering provider (referring_physician left out upstream).
    const text = fixture('omi-o23-v28-multi-order.hl7')
      .toString('utf8')
      .split('1689021144^REYES^CARMEN^^^^^^NPI')
      .join('')
      .replace(
        '\rTQ1|1||||||20260112163000',
        '\rPRT|1|AD||RP^Referring Provider^HL70912|5550001^OTHER^ANNE\rPRT|2|AD||OP^Ordering Provider^HL70912|1689021144^REYES^CARMEN^^^^^^NPI\rTQ1|1||||||20260112163000',
      );
    const result = mapHl7Message(parseHl7(text));
    expect(result.errors).toEqual([]);
    const [first, second] = result.orders;
    expect(first.request.orderingProvider).toEqual({
      identifier: { value: '1689021144', system: 'NPI' },
      name: { family: 'REYES', given: ['CARMEN'] },
    });
    expect(first.lineage).toContainEqual(
      expect.objectContaining({ target: 'orderingProvider.name.family', source: 'PRT[2]-5.2.1' }),
    );
    // The second order group has no PRT of its own: never the first group's.
    expect(second.request.orderingProvider).toBeUndefined();
  });

  it("reads a ZDS written before the ORC as the order's when the message has one order; warns when it has more", () => {
    // Modelled on senders that write ZDS right after MSH/PV1 (a published node HL7 client test
    // sends MSH then ZDS). Before: the Study Instance UID was dropped without a word.
    const lines = fixture('orm-o01-v231-ihe-swf-zds.hl7').toString('latin1').split('\r');
    const zds = lines.find((l) => l.startsWith('ZDS|'))!;
    const moved = lines.filter((l) => l !== zds);
    moved.splice(
      moved.findIndex((l) => l.startsWith('ORC|')),
      0,
      zds,
    ); // after PV1
    const one = mapHl7Message(parseHl7(moved.join('\r')));
    expect(one.errors).toEqual([]);
    expect(one.orders[0].request.studyInstanceUid).toBe(
      '1.2.276.0.7230010.3.1.2.2831176988.12345.1710769337.1',
    );
    expect(one.quirks.map((q) => q.code)).toContain('segment-outside-order');
    // Two orders: it belongs to neither; a warning at the ZDS, nothing guessed.
    const orc = moved.find((l) => l.startsWith('ORC|'))!;
    const obr = moved.find((l) => l.startsWith('OBR|'))!;
    const two = [
      ...moved,
      orc.split('PLC-100234').join('PLC-100235'),
      obr.split('PLC-100234').join('PLC-100235').replace('ACC-20240318-0042', 'ACC-20240318-0043'),
    ].join('\r');
    const both = mapHl7Message(parseHl7(two));
    expect(both.outcome).toBe('accept');
    expect(both.errors).toEqual([
      expect.objectContaining({ location: 'ZDS-1', code: 100, severity: 'W' }),
    ]);
    expect(both.orders.map((o) => o.request.studyInstanceUid)).toEqual([undefined, undefined]);
  });

  it('writes ERR texts in printable ASCII, so a Latin-1 or ASCII sender reads them whole', () => {
    // The must-agree text held an em dash: the ACK of a sender without UTF-8 showed '?'.
    const result = mapEdited(
      'orm-o01-v231-ihe-swf-zds.hl7',
      'OBR|1|PLC-100234^RADIS1|',
      'OBR|1|PLC-100299^RADIS1|',
    );
    expect(result.errors).toEqual([
      expect.objectContaining({ location: 'OBR-2', code: 102, severity: 'E' }),
    ]);
    for (const e of result.errors) expect(e.message).toMatch(/^[\x20-\x7e]+$/);
  });

  it('keeps one row per target and a rule ID on every row', () => {
    const targets = HL7_ORDER_FIELD_MAP.map((r) => r.target);
    expect(new Set(targets).size).toBe(targets.length);
    for (const row of HL7_ORDER_FIELD_MAP) expect(row.ruleId).toMatch(/^hl7\./);
  });
});

describe('applyDataMinimisation', () => {
  it('removes every field not allowed, keeping source, action and products', () => {
    const { request } = mapHl7Message(parseHl7(fixture('orm-o01-v231-ihe-swf-zds.hl7'))).orders[0];
    const minimal = applyDataMinimisation(request, [
      'patient.identifiers',
      'accessionNumber',
      'studyInstanceUid',
    ]);
    expect(minimal).toEqual({
      source: 'hl7v2',
      action: 'create',
      products: ['lung-nodule-ct'],
      patient: { identifiers: request.patient.identifiers },
      accessionNumber: 'ACC-20240318-0042',
      studyInstanceUid: '1.2.276.0.7230010.3.1.2.2831176988.12345.1710769337.1',
    });
    expect(request.patient.name).toBeDefined();
  });
});
