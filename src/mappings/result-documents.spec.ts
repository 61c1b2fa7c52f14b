import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseHl7 } from '../hl7/hl7-message';
import { buildDiagnosticReport, buildTask } from './fhir-result.mapping';
import { buildOrmStatus, buildOru, type Hl7ResultSettings } from './hl7-result.mapping';
import {
  applyOverride,
  localEndRow,
  parseStatusOverrides,
  type OutboundRow,
  type OutboundRowKey,
} from './outbound-rows';
import { dicomUidsFor, type PublicationInput } from './publication.model';
import {
  CLINICAL_CANCELLED,
  CLINICAL_END_REASONS,
  CLINICAL_FAILED_DEFAULT,
  CLINICAL_REPLACED,
} from './local-end-reasons';
import { parseResultContent } from './result-content.mapping';
import { STATUS_TABLE, statusRow, type StatusRowKey } from './status-mapping.table';

/**
 * Golden tests of the documents each row of the status table produces (DESIGN.md section 4):
 * per row, the Task status/reason, the DiagnosticReport status/conclusion/results and the
 * ORU's ORC-1/ORC-5/OBR-25/OBX-2/OBX-11. `UPDATE_GOLDEN=1` rewrites the file after a
 * deliberate change; a diff in review shows what a clinician would now see.
 */
const FIXTURES = join(__dirname, '..', '..', 'test', 'fixtures', 'outbound');
const GOLDEN = join(FIXTURES, 'documents.golden.json');
const RESULTS = readFileSync(join(FIXTURES, 'results-volumetry.json'));
const PDF = readFileSync(join(FIXTURES, 'report-odd-length.pdf'));
const ORM = readFileSync(
  join(__dirname, '..', '..', 'test', 'fixtures', 'hl7', 'orm-o01-v231-ihe-swf-zds.hl7'),
);
const ORDER_ID = '0b7f3c52-4a51-4e8e-9c63-5d3f1e2a7a10';
const STUDY = '1.2.826.0.1.3680043.8.498.12345678901234567890';
const HL7: Hl7ResultSettings = {
  sendingApplication: 'IMAGING-AI-ADAPTER',
  sendingFacility: 'ADAPTER',
  defaultVersion: '2.5.1',
  textType: 'TX',
};
const NOW = new Date('2026-11-21T08:45:13Z');

function rowOf(key: OutboundRowKey): OutboundRow {
  if (key === 'ENDED_LOCALLY_FAILED') return localEndRow('failed');
  if (key === 'ENDED_LOCALLY_CANCELLED') return localEndRow('cancelled');
  return { ...STATUS_TABLE[key as StatusRowKey], key };
}

function inputFor(row: OutboundRow, extra: Partial<PublicationInput> = {}): PublicationInput {
  const isResult = row.report === 'final';
  const docs: Partial<PublicationInput> = isResult
    ? { results: parseResultContent(RESULTS), pdf: PDF }
    : row.attach === 'failure-report'
      ? { pdf: PDF, reason: 'segmentation did not converge' }
      : row.attach === 'qc-report'
        ? {
            qcReport: { verdict: 'rejected', checks: [{ name: 'slice_thickness', passed: false }] },
          }
        : row.key.startsWith('ENDED')
          ? { reason: 'no usable study arrived within 1440 minutes' }
          : {};
  return {
    orderId: ORDER_ID,
    row,
    upstreamStatus: row.key.startsWith('QC_FAILED')
      ? 'QC_FAILED'
      : row.key.startsWith('ENDED')
        ? null
        : row.key,
    statusAt: '2026-11-21T08:45:12.000Z',
    correction: false,
    order: {
      source: 'hl7v2',
      request: {
        source: 'hl7v2',
        action: 'create',
        patient: {
          identifiers: [{ value: 'PAT-4711', system: 'HOSPA', type: 'MR' }],
          name: { family: 'SCHMIDT', given: ['ANNA', 'MARIA'] },
          birthDate: '1956-02-14',
          sex: 'female',
        },
        placerOrderNumber: { value: 'PLC-100234', system: 'RADIS1' },
        fillerOrderNumber: { value: 'FIL-55012', system: 'DSS_OF' },
        accessionNumber: 'ACC-20240318-0042',
        procedure: { code: '24590-2', system: 'LN', display: 'MR Brain' },
        studyInstanceUid: STUDY,
        products: ['brain-mr-volumetry'],
        requestedAt: '2024-03-18T15:00:00.000Z',
      },
      accessionNumber: 'ACC-20240318-0042',
      placerOrderNumber: 'PLC-100234',
      fillerOrderNumber: 'FIL-55012',
      studyInstanceUid: STUDY,
      createdAt: '2026-11-21T07:31:02.000Z',
    },
    device: {
      name: 'brain-mr-volumetry',
      manufacturer: 'Imaging Analysis Service',
      version: '3.2.1',
      udi: '(01)00850012345678(10)3.2.1',
      uid: '2.25.1',
    },
    dicom: dicomUidsFor(ORDER_ID, 0, STUDY),
    ...docs,
    ...extra,
  };
}

/** What a reviewer needs to see of each document, PDF bytes left out. */
function summary(input: PublicationInput) {
  const { row } = input;
  const task = buildTask(input);
  const out: Record<string, unknown> = {
    task: {
      status: task.status,
      statusReason: task.statusReason?.text,
      businessStatus: task.businessStatus?.coding?.[0]?.code,
      output: task.output !== undefined,
    },
  };
  if (row.publish.includes('fhir-diagnostic-report')) {
    const dr = buildDiagnosticReport(input);
    out.diagnosticReport = {
      status: dr.status,
      conclusion: dr.conclusion,
      results: dr.result?.length ?? 0,
      presentedForm: dr.presentedForm?.map((f) => f.contentType),
      firstObservation: dr.contained?.find((c) => c.resourceType === 'Observation'),
    };
  }
  const original = parseHl7(ORM);
  if (row.publish.includes('hl7-oru')) {
    const oru = parseHl7(buildOru(input, original, HL7, 'IAA1', NOW).text);
    out.oru = {
      msh9: oru.msh.rawField(9),
      msh12: oru.version,
      orc: [oru.get('ORC-1'), oru.get('ORC-5'), oru.get('ORC-16.2')],
      // Placer and filler numbers the RIS matches the result by (ORC = OBR, issue #20).
      numbers: [oru.get('ORC-2'), oru.get('ORC-3'), oru.get('OBR-2'), oru.get('OBR-3')],
      obr25: oru.get('OBR-25'),
      obx: oru.segmentsById('OBX').map((o) => `${o.value(2)} ${o.value(3)} ${o.value(11)}`),
    };
  }
  if (row.publish.includes('hl7-orm-status')) {
    const orm = parseHl7(buildOrmStatus(input, original, HL7, 'IAA2', NOW).text);
    out.ormStatus = { orc: [orm.get('ORC-1'), orm.get('ORC-5')], obr25: orm.get('OBR-25') };
  }
  out.publish = row.publish;
  return out;
}

const KEYS = Object.keys(STATUS_TABLE) as OutboundRowKey[];

describe('result documents per status row (golden)', () => {
  // Through JSON, as the golden file holds it (undefined becomes null or disappears).
  const actual = JSON.parse(
    JSON.stringify(Object.fromEntries(KEYS.map((k) => [k, summary(inputFor(rowOf(k)))]))),
  ) as Record<string, unknown>;
  if (process.env.UPDATE_GOLDEN === '1' || !existsSync(GOLDEN)) {
    writeFileSync(GOLDEN, `${JSON.stringify(actual, null, 2)}\n`);
  }
  const golden = JSON.parse(readFileSync(GOLDEN, 'utf8')) as Record<string, unknown>;

  it.each(KEYS)('%s matches its golden documents', (key) => {
    expect(actual[key]).toEqual(golden[key]);
  });

  it("the ORM status message's ORC-1 is the row's (what the table and the audit page say is what the RIS gets)", () => {
    // Table 0119: SC (status changed) is the filler's unsolicited status; OK answers a placer's
    // order in an ORR^O02. Before: RECEIVED said OK in the table (and on the audit page's
    // mapping tables), and the message sent said SC.
    for (const key of KEYS) {
      const row = rowOf(key);
      if (!row.publish.includes('hl7-orm-status')) continue;
      const orm = parseHl7(buildOrmStatus(inputFor(row), parseHl7(ORM), HL7, 'IAA3', NOW).text);
      expect([key, orm.get('ORC-1')]).toEqual([key, row.hl7.orderControl]);
    }
  });

  it('no-result rows never carry a measurement, and say why', () => {
    for (const key of KEYS) {
      const row = rowOf(key);
      if (row.report !== 'cancelled') continue;
      const input = inputFor(row);
      const dr = buildDiagnosticReport(input);
      expect(dr.result).toBeUndefined();
      expect(dr.conclusion).toMatch(/^(No result|Not analysable)/);
      const oru = parseHl7(buildOru(input, undefined, HL7, 'X1', NOW).text);
      expect(oru.segmentsById('OBX').some((o) => o.value(2) === 'NM')).toBe(false);
      expect(oru.get('OBR-25')).toBe('X');
    }
  });

  it('every local end reads as one clinical sentence in each field the clinic reads: no word group said twice (was: "No result: the order was cancelled. cancelled as the orderer asked")', () => {
    /** A word said twice in a row, or a group of two words said twice. */
    const repeated = (text: string): string | undefined => {
      const words = text.toLowerCase().match(/[a-z]+/g) ?? [];
      for (let i = 1; i < words.length; i++) if (words[i] === words[i - 1]) return words[i];
      const pairs = new Set<string>();
      for (let i = 1; i < words.length; i++) {
        const pair = `${words[i - 1]} ${words[i]}`;
        if (pairs.has(pair)) return pair;
        pairs.add(pair);
      }
      return undefined;
    };
    const ends: Array<[OutboundRow, string]> = [
      ...[...Object.values(CLINICAL_END_REASONS), CLINICAL_FAILED_DEFAULT].map(
        (reason): [OutboundRow, string] => [localEndRow('failed'), reason],
      ),
      [localEndRow('cancelled'), CLINICAL_CANCELLED],
      [localEndRow('cancelled', { cancelRequestedByOrderer: true }), CLINICAL_CANCELLED],
      [localEndRow('cancelled', { cancelRequestedByOrderer: true }), CLINICAL_REPLACED],
      [
        statusRow('CANCELLED', { qcBypassPossible: false, cancelRequestedByOrderer: true }),
        CLINICAL_REPLACED,
      ],
    ];
    for (const [row, reason] of ends) {
      const input = inputFor(row, { reason });
      const oru = parseHl7(buildOru(input, undefined, HL7, 'X3', NOW).text);
      const fields = {
        statusReason: buildTask(input).statusReason?.text ?? '',
        conclusion: buildDiagnosticReport(input).conclusion ?? '',
        orc16: oru.get('ORC-16.2') ?? '',
        obx: oru
          .segmentsById('OBX')
          .filter((o) => o.value(2) === 'TX')
          .map((o) => o.value(5) ?? '')
          .join(' '),
      };
      for (const [field, text] of Object.entries(fields)) {
        expect({ field, text, repeated: repeated(text) }).toEqual({
          field,
          text,
          repeated: undefined,
        });
      }
      // One sentence, as a clinician writes it: a capital first, a full stop last.
      expect(fields.conclusion).toMatch(/^[A-Z][^]*\.$/);
      expect(fields.conclusion.split(/\. /)).toHaveLength(
        reason.split(/\. /).length, // the sentences of the reason, no lead before them
      );
    }
  });

  it('escapes every value it writes (a delimiter in a reason never breaks the message)', () => {
    const input = inputFor(rowOf('ENDED_LOCALLY_FAILED'), { reason: 'refused: a|b^c~d\\e&f' });
    const oru = parseHl7(buildOru(input, undefined, HL7, 'X2', NOW).text);
    expect(oru.get('ORC-16.2')).toContain('refused: a|b^c~d\\e&f');
    expect(oru.segmentsById('ORC')).toHaveLength(1);
  });

  it('FT joins the report lines with \\.br\\, each line escaped', () => {
    const input = inputFor(rowOf('DELIVERED'));
    const oru = buildOru(input, undefined, { ...HL7, textType: 'FT' }, 'X4', NOW).text;
    const obx = oru.split('\r').find((l) => l.startsWith('OBX|1|FT|'))!;
    expect(obx).toContain('\\.br\\Whole brain: ');
    expect(parseHl7(oru).segmentsById('OBX')[0]!.value(5)).toContain('\nWhole brain: ');
  });

  it("answers in the order's own character set and version (8859/1, v2.4), PID as received", () => {
    const latin1 = readFileSync(
      join(__dirname, '..', '..', 'test', 'fixtures', 'hl7', 'orm-o01-v24-latin1-crlf.hl7'),
    );
    const original = parseHl7(latin1);
    const input = inputFor(rowOf('DELIVERED'));
    // the patient that order was read as (the PID's demographics are the order's current ones)
    input.order.request.patient = {
      identifiers: [{ value: '0012345678', system: 'KLINIKUM_NORD', type: 'PI' }],
      name: { family: 'MÜLLER', given: ['JÜRGEN'], prefix: 'Dr.' },
      birthDate: '1962-11-03',
      sex: 'male',
    };
    const built = buildOru(input, original, HL7, 'X5', NOW);
    expect(built.version).toBe('2.4');
    const back = parseHl7(built.bytes);
    expect(back.msh.value(18)).toBe('8859/1');
    expect(back.get('PID-5.1')).toBe('MÜLLER');
    expect(built.bytes.includes(Buffer.from('MÜLLER', 'latin1'))).toBe(true);
    expect(back.get('MSH-5')).toBe('ORBIS');
  });

  it('the QC_BYPASS Task says who bypassed and why', () => {
    const task = buildTask(
      inputFor(rowOf('QC_BYPASS'), {
        qcBypass: { by: 'dr.meier', reason: 'motion artefact acceptable' },
      }),
    );
    expect(task.status).toBe('in-progress');
    expect(task.statusReason?.text).toBe(
      'QC rejection bypassed by a clinician: by dr.meier: motion artefact acceptable',
    );
  });

  it('every ORU carries numbers the RIS can match: a FHIR order without identifiers gets the ServiceRequest id as placer and our order id as filler', () => {
    const input = inputFor(rowOf('DELIVERED'), { serviceRequest: 'ServiceRequest/sr-4711' });
    input.order = {
      ...input.order,
      source: 'fhir',
      request: {
        ...input.order.request,
        source: 'fhir',
        placerOrderNumber: undefined,
        fillerOrderNumber: undefined,
      },
      placerOrderNumber: null,
      fillerOrderNumber: null,
    };
    const oru = parseHl7(buildOru(input, undefined, HL7, 'X4', NOW).text);
    expect([oru.get('ORC-2'), oru.get('ORC-2.2')]).toEqual(['sr-4711', 'FHIR']);
    expect([oru.get('ORC-3'), oru.get('ORC-3.2')]).toEqual([ORDER_ID, 'IMAGING-AI-ADAPTER']);
    expect([oru.get('OBR-2'), oru.get('OBR-3')]).toEqual(['sr-4711', ORDER_ID]);
  });

  it('a correction is corrected / C; a QC bypass carries its caveat', () => {
    const input = inputFor(rowOf('DELIVERED'), {
      correction: true,
      qcBypass: { by: 'dr.a', reason: 'motion ok' },
    });
    input.results = { ...input.results!, caveat: undefined, qcBypassed: true };
    expect(buildDiagnosticReport(input).status).toBe('corrected');
    expect(buildDiagnosticReport(input).conclusion).toMatch(/QC failure was bypassed/);
    const oru = parseHl7(buildOru(input, undefined, HL7, 'X3', NOW).text);
    expect(oru.get('OBR-25')).toBe('C');
    expect(oru.segmentsById('OBX').every((o) => o.value(11) === 'C')).toBe(true);
  });

  it('site overrides change the outbound columns but never turn a no-result row into a finding', () => {
    const overrides = parseStatusOverrides({
      ANALYSIS_RUNNING: { hl7: { orderStatus: 'SC' }, publish: ['fhir-task'] },
    });
    const row = applyOverride(rowOf('ANALYSIS_RUNNING'), overrides);
    expect(row.hl7).toMatchObject({ orderControl: 'SC', orderStatus: 'SC', resultStatus: 'I' });
    expect(row.publish).toEqual(['fhir-task']);
    expect(() => parseStatusOverrides({ FAILED: { report: 'final' } })).toThrow(/stays cancelled/);
    expect(() => parseStatusOverrides({ EXPIRED: { hl7: { resultStatus: 'F' } } })).toThrow(
      /stays X/,
    );
    expect(() => parseStatusOverrides({ CANCELLED: { publish: ['dicom-sr'] } })).toThrow(/no SR/);
    expect(() => parseStatusOverrides({ NOPE: {} })).toThrow(/unknown row/);
  });

  it('no override presents a row without findings as a result, or writes a code outside its table', () => {
    // a final DiagnosticReport for a QC rejection still awaiting a clinician's decision
    expect(() =>
      parseStatusOverrides({
        QC_FAILED_BYPASSABLE: {
          report: 'final',
          publish: ['fhir-task', 'fhir-diagnostic-report'],
        },
      }),
    ).toThrow(/QC_FAILED_BYPASSABLE: report final would present it as a result/);
    // the no-result rows' other columns: OBX-11 F, ORC-5 CM, a Task completed
    expect(() => parseStatusOverrides({ FAILED: { hl7: { observationStatus: 'F' } } })).toThrow(
      /FAILED: hl7.observationStatus F would present it as a result/,
    );
    expect(() => parseStatusOverrides({ EXPIRED: { hl7: { orderStatus: 'CM' } } })).toThrow(
      /hl7.orderStatus CM/,
    );
    expect(() =>
      parseStatusOverrides({ QC_FAILED_FINAL: { task: { status: 'completed' } } }),
    ).toThrow(/task.status completed/);
    expect(() => parseStatusOverrides({ IN_REVIEW: { publish: ['dicom-sr'] } })).toThrow(
      /IN_REVIEW: dicom-sr would present it as a result/,
    );
    // codes outside their tables, each named
    expect(() =>
      parseStatusOverrides({
        ANALYSIS_RUNNING: {
          task: { status: 'done' as never },
          hl7: { orderStatus: 'ZZ' as never },
        },
      }),
    ).toThrow(
      /task.status: "done" is not one of .*; mappings.status.ANALYSIS_RUNNING.hl7.orderStatus: "ZZ" is not one of SC, IP, HD, CM, CA/,
    );
    // what stays allowed: a registered report for IN_REVIEW (DESIGN.md section 4), an ORU for
    // a status in progress, anything valid on DELIVERED
    expect(() =>
      parseStatusOverrides({
        IN_REVIEW: {
          report: 'registered',
          publish: ['fhir-task', 'fhir-diagnostic-report', 'hl7-oru'],
        },
        DELIVERED: { hl7: { orderControl: 'SC' } },
      }),
    ).not.toThrow();
  });

  it('an ORU a site publishes for a status in progress: OBX-11 I (results pending), never F, and where it stands', () => {
    const overrides = parseStatusOverrides({
      ANALYSIS_RUNNING: { publish: ['fhir-task', 'hl7-oru'] },
      QC_FAILED_BYPASSABLE: { publish: ['fhir-task', 'hl7-oru'] },
    });
    for (const key of ['ANALYSIS_RUNNING', 'QC_FAILED_BYPASSABLE'] as const) {
      const row = applyOverride(rowOf(key), overrides);
      const oru = parseHl7(buildOru(inputFor(row), parseHl7(ORM), HL7, 'X4', NOW).text);
      expect(oru.get('OBR-25')).toBe('I');
      // before: OBX-11 F on a "No result." line
      expect(oru.segmentsById('OBX').map((o) => o.value(11))).toEqual(
        oru.segmentsById('OBX').map(() => 'I'),
      );
      expect(oru.get('OBX-5')).toBe(
        key === 'ANALYSIS_RUNNING'
          ? 'ML analysis running'
          : 'QC rejection: awaiting a clinician decision (bypass or accept): awaiting a human decision; never a result',
      );
    }
  });
});
