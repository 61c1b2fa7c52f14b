import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { containedIssues, validateFhirResource } from '../fhir/fhir-validator';
import { parseHl7 } from '../hl7/hl7-message';
import { buildDiagnosticReport, buildTask } from './fhir-result.mapping';
import { DEFAULT_HL7_ORDER_MAPPING_CONFIG } from './hl7-order.config';
import { mapHl7Message } from './hl7-order.mapping';
import type { PublicationInput } from './publication.model';
import { parseResultContent } from './result-content.mapping';
import { STATUS_TABLE } from './status-mapping.table';

/**
 * What we publish is valid R4 whatever the order and the upstream held: the publisher refuses
 * (dead-letters) a resource the validator refuses, so one bad character kept a whole result
 * from the EHR. Each value below was seen to do so.
 */
const RESULTS = join(
  __dirname,
  '..',
  '..',
  'test',
  'fixtures',
  'outbound',
  'results-volumetry.json',
);

function hostileInput(): PublicationInput {
  const doc = JSON.parse(readFileSync(RESULTS, 'utf8')) as {
    impression: string;
    findings: Array<{ structure: string }>;
  };
  // a form feed and a NUL from a PDF text extraction, a lone surrogate, a BEL in a name
  doc.impression = 'Atrophy\fpage 2\u0000 \ud800 end';
  doc.findings[0]!.structure = 'Left\u0007hippocampus';
  return {
    orderId: '0b7f3c52-4a51-4e8e-9c63-5d3f1e2a7a10',
    row: { ...STATUS_TABLE.DELIVERED, key: 'DELIVERED' },
    upstreamStatus: 'DELIVERED',
    statusAt: '2026-11-21T08:45:12.000Z',
    correction: false,
    reason: 'analyst note\u0007',
    results: parseResultContent(JSON.stringify(doc)),
    order: {
      source: 'hl7v2',
      request: {
        source: 'hl7v2',
        action: 'create',
        patient: { identifiers: [{ value: 'PAT-4711', system: 'HOSP A' }] },
        // an HL7 namespace id with a space (EI.2), a local code with doubled spaces (CWE.1)
        placerOrderNumber: { value: 'PLC-100234', system: 'RADIS 1' },
        procedure: { code: ' CT  CHEST ', system: 'L', display: 'CT chest\u0001' },
        products: ['lung-ct'],
        requestedAt: '2024-03-18T15:00:00.000+01:00',
      },
      createdAt: '2026-11-21T07:31:02.000Z',
    },
    device: {
      name: 'lung-ct',
      manufacturer: 'Imaging Analysis Service',
      version: '1',
      uid: '2.25.1',
    },
  } as unknown as PublicationInput;
}

describe('published Task and DiagnosticReport values are valid R4', () => {
  it('with control characters, lone surrogates, spaces in systems and codes in the input', () => {
    const input = hostileInput();
    const task = buildTask(input);
    const report = buildDiagnosticReport(input);
    expect(validateFhirResource(task)).toEqual([]);
    expect(validateFhirResource(report)).toEqual([]);
    expect(report.conclusion).toBe('Atrophy\uFFFDpage 2\uFFFD \uFFFD end');
    expect(report.code.coding?.[0]?.code).toBe('CT CHEST');
    expect(task.basedOn?.[0]?.identifier).toEqual({ system: 'RADIS%201', value: 'PLC-100234' });
    expect(task.statusReason?.text).toMatch(/analyst note\uFFFD$/);
  });

  it.each([
    ['LN', 'http://loinc.org'],
    ['LNC', 'http://loinc.org'],
    ['SNOMED CT', 'http://snomed.info/sct'],
    ['CPT4', 'http://www.ama-assn.org/go/cpt'],
    ['99RAD', undefined],
  ])('an HL7 order coded in %s: the report code names %s', (system, uri) => {
    const input = hostileInput();
    input.order.request.procedure = { code: '24627-2', system, display: 'CT Chest' };
    const coding = buildDiagnosticReport(input).code.coding?.[0];
    expect(coding?.system).toBe(uri);
    expect(coding?.code).toBe('24627-2');
  });

  it('an EHR ServiceRequest whose subject is its contained Patient (#pat1): the patient by identifier, not a reference into nothing', () => {
    // R4 ref-1: a local reference resolves within the resource that holds it. Copied into our
    // Task and DiagnosticReport, `#pat1` named no contained resource: a server evaluating
    // invariants (HAPI, Firely) refuses both, and the result never reached the EHR.
    const input = {
      ...hostileInput(),
      serviceRequest: 'https://ehr.example.org/fhir/ServiceRequest/sr-1',
      patientReference: '#pat1',
    };
    for (const resource of [buildTask(input), buildDiagnosticReport(input)]) {
      expect([...validateFhirResource(resource), ...containedIssues(resource)]).toEqual([]);
    }
    expect(buildDiagnosticReport(input).subject).toEqual({
      type: 'Patient',
      identifier: { system: 'HOSP%20A', value: 'PAT-4711' },
    });
    // a reference the EHR resolves is kept
    input.patientReference = 'Patient/p-77';
    expect(buildTask(input).for).toEqual({ reference: 'Patient/p-77' });
  });

  it('the product UDI in GS1 human-readable form: the DI in deviceIdentifier, the whole string in carrierHRF', () => {
    // GET /products answers `UDI: "(01)00812345678906(10)3.2.0"` (the sandbox, as FDA GUDID
    // labels print it): the device identifier is the GTIN after (01); (10) is the lot/version,
    // a production identifier. Before, the whole string went out as deviceIdentifier, which
    // an EHR looking the DI up in GUDID finds nothing under.
    const input = hostileInput();
    input.device = { ...input.device, udi: '(01)00812345678906(10)3.2.0' };
    const task = buildTask(input);
    expect(validateFhirResource(task)).toEqual([]);
    const device = task.contained?.[0] as { udiCarrier?: unknown };
    expect(device.udiCarrier).toEqual([
      {
        deviceIdentifier: '00812345678906',
        issuer: 'http://hl7.org/fhir/NamingSystem/gs1-di',
        carrierHRF: '(01)00812345678906(10)3.2.0',
      },
    ]);
    // a UDI in another form is kept whole as the identifier
    input.device = {
      ...input.device,
      udi: '+H123PARTNO1/$$420020216LOT123456789012345/SXYZ456789012345678/16D20130202C',
    };
    expect((buildTask(input).contained?.[0] as { udiCarrier?: unknown }).udiCarrier).toEqual([
      {
        deviceIdentifier:
          '+H123PARTNO1/$$420020216LOT123456789012345/SXYZ456789012345678/16D20130202C',
      },
    ]);
  });

  it('identifiers an HL7 order named by OID only (CX-4 / EI `&1.2.250…&ISO`): the system is urn:oid:, not the bare OID', () => {
    // A French RIS's OMI^O23 (test/fixtures/hl7/omi-o23-v251-nir-before-pi.hl7) with the
    // patient number and the placer number under assigning authorities given by OID only, as
    // IHE ITI profiles write them. R4 identifier systems are URIs, an OID as `urn:oid:`
    // (datatypes.html#uri): the bare `1.2.250.1.999.1.1` matched no Patient of the EHR.
    const text = readFileSync(
      join(__dirname, '..', '..', 'test', 'fixtures', 'hl7', 'omi-o23-v251-nir-before-pi.hl7'),
      'latin1',
    )
      .split(/\r\n|\r|\n/)
      .filter(Boolean)
      .map((line) => {
        const f = line.split('|');
        if (f[0] === 'PID') f[3] = 'M-0048812^^^&1.2.250.1.999.1.1&ISO^PI';
        if (f[0] === 'ORC' || f[0] === 'OBR') f[2] = 'DMP-20771^^1.2.250.1.999.1.2^ISO';
        return f.join('|');
      })
      .join('\r');
    const mapped = mapHl7Message(parseHl7(text), {
      ...DEFAULT_HL7_ORDER_MAPPING_CONFIG,
      unknownProcedure: { kind: 'default-products', products: ['neuro-volumetry'] },
    });
    expect(mapped.outcome).not.toBe('error');
    const input = hostileInput();
    input.order.request = mapped.orders[0]!.request;
    const task = buildTask(input);
    expect(validateFhirResource(task)).toEqual([]);
    expect(task.for?.identifier).toEqual({
      system: 'urn:oid:1.2.250.1.999.1.1',
      value: 'M-0048812',
    });
    expect(task.basedOn?.[0]?.identifier).toEqual({
      system: 'urn:oid:1.2.250.1.999.1.2',
      value: 'DMP-20771',
    });
    expect(buildDiagnosticReport(input).subject?.identifier?.system).toBe(
      'urn:oid:1.2.250.1.999.1.1',
    );
  });
});
