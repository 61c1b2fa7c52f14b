import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ImagingStudy, Patient, ServiceRequest } from '@medplum/fhirtypes';
import { DEFAULT_FHIR_ORDER_MAPPING_CONFIG } from './fhir-order.config';
import {
  actionFor,
  FHIR_ORDER_FIELD_MAP,
  mapServiceRequest,
  type FhirOrderContext,
} from './fhir-order.mapping';
import type { OrderState } from '../domain/order-state';
import { deriveTaskStatus } from './fhir-task.mapping';

const FIXTURES = join(__dirname, '..', '..', 'test', 'fixtures', 'fhir');
const fixture = <T>(name: string): T =>
  JSON.parse(readFileSync(join(FIXTURES, `${name}.json`), 'utf8')) as T;

const ctx = (over: Partial<FhirOrderContext> = {}): FhirOrderContext => ({
  patient: { resource: fixture<Patient>('r4-patient-example-dicom'), source: 'EHR Patient/dicom' },
  imagingStudies: [],
  reasons: new Map(),
  ...over,
});

describe('FHIR ServiceRequest → OrderRequest (golden)', () => {
  it('maps the R4 spec example "di" with its Patient, field by field, with lineage', () => {
    const result = mapServiceRequest(
      fixture<ServiceRequest>('r4-servicerequest-example-di'),
      ctx(),
      'create',
    );
    expect(result.outcome).toBe('accept');
    expect(result.request).toEqual({
      source: 'fhir',
      action: 'create',
      patient: {
        identifiers: [{ system: 'http://nema.org/examples/patients', value: 'MINT1234' }],
        name: { family: 'MINT_TEST' },
        sex: 'male',
      },
      procedure: { code: '24627-2', system: 'http://loinc.org', display: 'Chest CT' },
      // Reference.display only: the name is split and the quirk recorded
      orderingProvider: { name: { prefix: 'Dr.', given: ['Adam'], family: 'Careful' } },
      reasonForStudy: [{ display: 'Check for metastatic disease' }],
      requestedAt: '2013-05-08T02:33:27.000Z',
      products: ['lung-nodule-ct'],
    });
    expect(result.lineage).toEqual([
      {
        target: 'action',
        source: 'ServiceRequest.status',
        value: 'create',
        ruleId: 'fhir.order.action',
        rule: 'request-status: active → create',
      },
      {
        target: 'patient.identifiers[0].value',
        source: 'EHR Patient/dicom Patient.identifier[0].value',
        value: 'MINT1234',
        ruleId: 'fhir.patient.identifiers',
      },
      {
        target: 'patient.identifiers[0].system',
        source: 'EHR Patient/dicom Patient.identifier[0].system',
        value: 'http://nema.org/examples/patients',
        ruleId: 'fhir.patient.identifiers',
      },
      {
        target: 'patient.name.family',
        source: 'EHR Patient/dicom Patient.name[0].family',
        value: 'MINT_TEST',
        ruleId: 'fhir.patient.name',
      },
      {
        target: 'patient.sex',
        source: 'EHR Patient/dicom Patient.gender',
        value: 'male',
        ruleId: 'fhir.patient.gender',
      },
      {
        target: 'procedure.code',
        source: 'ServiceRequest.code.coding[0].code',
        value: '24627-2',
        ruleId: 'fhir.order.procedure',
      },
      {
        target: 'procedure.system',
        source: 'ServiceRequest.code.coding[0].system',
        value: 'http://loinc.org',
        ruleId: 'fhir.order.procedure',
      },
      {
        target: 'procedure.display',
        source: 'ServiceRequest.code.coding[0].display',
        value: 'Chest CT',
        ruleId: 'fhir.order.procedure',
      },
      {
        target: 'orderingProvider.name.family',
        source: 'ServiceRequest.requester.display.family',
        value: 'Careful',
        ruleId: 'fhir.order.requester',
      },
      {
        target: 'orderingProvider.name.given[0]',
        source: 'ServiceRequest.requester.display.given[0]',
        value: 'Adam',
        ruleId: 'fhir.order.requester',
      },
      {
        target: 'orderingProvider.name.prefix',
        source: 'ServiceRequest.requester.display.prefix',
        value: 'Dr.',
        ruleId: 'fhir.order.requester',
      },
      {
        target: 'reasonForStudy[0].display',
        source: 'ServiceRequest.reasonCode[0]',
        value: 'Check for metastatic disease',
        ruleId: 'fhir.order.reason',
      },
      {
        target: 'requestedAt',
        source: 'ServiceRequest.occurrenceDateTime',
        value: '2013-05-08T02:33:27.000Z',
        ruleId: 'fhir.order.occurrence',
      },
      {
        target: 'products[0]',
        source: 'ServiceRequest.code.coding[0]',
        value: 'lung-nodule-ct',
        ruleId: 'fhir.order.products',
        rule: 'product-table: 24627-2^LN → lung-nodule-ct',
      },
    ]);
    expect(result.quirks).toEqual([
      {
        code: 'fhir-requester-display-only',
        detail: 'requester name split from Reference.display (not resolvable)',
      },
    ]);
  });

  it('reads the Study Instance UID and modality from the R4 ImagingStudy example; tolerates a bare UID', () => {
    const study = fixture<ImagingStudy>('r4-imagingstudy-example');
    const sr = fixture<ServiceRequest>('r4-servicerequest-example-di');
    const ok = mapServiceRequest(
      sr,
      ctx({ imagingStudies: [{ resource: study, source: 'Bundle.entry[2]' }] }),
      'create',
    );
    expect(ok.request).toMatchObject({
      studyInstanceUid: '2.16.124.113543.6003.1154777499.30246.19789.3503430045',
      modality: 'CT',
    });
    const bare = { ...study, identifier: [{ system: 'urn:dicom:uid', value: '1.2.3.4' }] };
    const tolerated = mapServiceRequest(
      sr,
      ctx({ imagingStudies: [{ resource: bare, source: 'x' }] }),
      'create',
    );
    expect(tolerated.request?.studyInstanceUid).toBe('1.2.3.4');
    expect(tolerated.quirks.map((q) => q.code)).toContain('fhir-dicom-uid-bare');
    const wrong = {
      ...study,
      identifier: [{ system: 'urn:dicom:uid', value: 'urn:oid:not.a.uid' }],
    };
    const refused = mapServiceRequest(
      sr,
      ctx({ imagingStudies: [{ resource: wrong, source: 'x' }] }),
      'create',
    );
    expect(refused.outcome).toBe('error');
    expect(refused.issues[0]).toMatchObject({
      code: 'value',
      expression: 'ImagingStudy.identifier[0].value',
    });
  });

  it('maps reasonReference from the resolved Condition, else its display', () => {
    const sr: ServiceRequest = {
      ...fixture<ServiceRequest>('r4-servicerequest-example-di'),
      reasonCode: undefined,
      reasonReference: [
        { reference: '#c1' },
        { reference: 'Condition/unknown', display: 'Suspected lung nodule' },
      ],
    };
    const condition = {
      resourceType: 'Condition' as const,
      id: 'c1',
      subject: { reference: 'Patient/dicom' },
      code: {
        coding: [
          {
            system: 'http://snomed.info/sct',
            code: '363358000',
            display: 'Malignant tumor of lung',
          },
        ],
      },
    };
    const result = mapServiceRequest(
      sr,
      ctx({ reasons: new Map([['#c1', { resource: condition, source: 'contained #c1' }]]) }),
      'create',
    );
    expect(result.request?.reasonForStudy).toEqual([
      { code: '363358000', system: 'http://snomed.info/sct', display: 'Malignant tumor of lung' },
      { display: 'Suspected lung nodule' },
    ]);
    expect(
      result.lineage.filter((l) => l.ruleId === 'fhir.order.reason').map((l) => l.source),
    ).toEqual(['contained #c1 Condition.code', 'ServiceRequest.reasonReference[1].display']);
  });

  it('follows the configured rule for unknown codes', () => {
    const sr = {
      ...fixture<ServiceRequest>('r4-servicerequest-example-di'),
      code: { coding: [{ system: 'http://snomed.info/sct', code: '77477000' }] },
    };
    const rejected = mapServiceRequest(sr, ctx(), 'create');
    expect(rejected.outcome).toBe('error');
    expect(rejected.issues).toEqual([
      expect.objectContaining({ code: 'code-invalid', expression: 'ServiceRequest.code.coding' }),
    ]);
    const defaulted = mapServiceRequest(sr, ctx(), 'create', {
      ...DEFAULT_FHIR_ORDER_MAPPING_CONFIG,
      unknownProcedure: { kind: 'default-products', products: ['triage-general'] },
    });
    expect(defaulted.request?.products).toEqual(['triage-general']);
    expect(defaulted.quirks.map((q) => q.code)).toContain('fhir-unknown-procedure');
    // a local code without system matches the product table's system-less rows
    const local = mapServiceRequest(
      { ...sr, code: { coding: [{ system: 'urn:oid:1.2.3.99', code: 'CTTHX' }] } },
      ctx(),
      'create',
    );
    expect(local.request?.products).toEqual(['lung-nodule-ct']);
  });

  it('decides the action from status and interaction (R4 request-status)', () => {
    const sr = fixture<ServiceRequest>('r4-servicerequest-example-di');
    expect(actionFor(sr, 'create')).toEqual({ action: 'create' });
    expect(actionFor({ ...sr, status: 'revoked' }, 'update')).toEqual({ action: 'cancel' });
    expect(actionFor({ ...sr, status: 'entered-in-error' }, 'update')).toEqual({
      action: 'cancel',
    });
    expect(actionFor({ ...sr, status: 'on-hold' }, 'update')).toEqual({ action: 'update' });
    expect(actionFor({ ...sr, status: 'draft' }, 'create')).toMatchObject({
      issue: { expression: 'ServiceRequest.status' },
    });
    // A create is never a cancel: a revoked request that nobody ordered is refused, not answered as done.
    for (const status of ['revoked', 'entered-in-error'] as const)
      expect(actionFor({ ...sr, status }, 'create')).toMatchObject({
        issue: { code: 'business-rule', expression: 'ServiceRequest.status' },
      });
    const proposal = mapServiceRequest({ ...sr, intent: 'proposal' }, ctx(), 'create');
    expect(proposal.issues.map((i) => i.expression)).toEqual(['ServiceRequest.intent']);
  });

  it('says what is missing: a status given only as an extension, a coding without code', () => {
    // Before: 'got undefined' and 'no AI product is configured for (no system)|'.
    const sr = fixture<ServiceRequest>('r4-servicerequest-example-di');
    const noStatus = { ...sr, status: undefined } as unknown as ServiceRequest;
    const decided = actionFor(noStatus, 'create');
    expect('issue' in decided && decided.issue.diagnostics).toBe(
      'a new order must have status active; ServiceRequest.status has no value (only an extension)',
    );
    const displayOnly = mapServiceRequest(
      { ...sr, code: { coding: [{ display: 'CT CHEST WO CONTRAST' }] } },
      ctx(),
      'create',
    );
    expect(displayOnly.issues.map((i) => i.diagnostics)).toContain(
      'no AI product is configured for (no system)|(no code) "CT CHEST WO CONTRAST"',
    );
  });

  it('has one row per target', () => {
    const targets = FHIR_ORDER_FIELD_MAP.map((r) => r.target);
    expect(new Set(targets).size).toBe(targets.length);
  });

  it('derives an interim Task status for every order state', () => {
    expect(deriveTaskStatus('received', null)).toEqual({
      status: 'received',
      businessStatus: {
        coding: [
          {
            system: 'urn:imaging-ai-adapter:order-state',
            code: 'received',
            display: 'Received by the adapter, not yet placed for analysis',
          },
        ],
        text: 'received',
      },
    });
    expect(deriveTaskStatus('processing', 'ANALYSIS_RUNNING')).toEqual({
      status: 'in-progress',
      businessStatus: {
        coding: [{ system: 'urn:imaging-ai-adapter:upstream-status', code: 'ANALYSIS_RUNNING' }],
        text: 'ANALYSIS_RUNNING',
      },
    });
    expect(deriveTaskStatus('qc-hold', 'QC_FAILED').status).toBe('on-hold');
    expect(deriveTaskStatus('failed', 'FAILED')).toMatchObject({
      status: 'failed',
      statusReason: expect.any(String),
    }); // results that expired upstream before they were fetched: no result is coming
    expect(deriveTaskStatus('delivered', 'EXPIRED')).toMatchObject({
      status: 'failed',
      businessStatus: { coding: [{ code: 'EXPIRED' }] },
    });
    expect(deriveTaskStatus('delivered', 'DELIVERED').status).toBe('completed');
  });

  it('names the state when a stored row holds one outside the model', () => {
    expect(() => deriveTaskStatus('toString' as OrderState, null)).toThrow(
      'no Task status for order state "toString"',
    );
    expect(() => deriveTaskStatus('archived' as OrderState, null)).toThrow(
      'no Task status for order state "archived"',
    );
  });
});

describe('identifiers padded with spaces', () => {
  it('stores accession, placer, filler and patient identifiers without the spaces around them', () => {
    // the R4 "di" example with the Imaging IG example's ACSN, PLAC and FILL identifiers
    const sr = fixture<ServiceRequest>('r4-servicerequest-example-di');
    const pad = (v: string) => ` ${v}   `;
    sr.identifier = fixture<ServiceRequest>('imaging-ig-servicerequest-example').identifier!.map(
      (i) => ({ ...i, value: pad(i.value!) }),
    );
    const patient = fixture<Patient>('r4-patient-example-dicom');
    patient.identifier = patient.identifier!.map((i) => ({ ...i, value: pad(i.value!) }));
    const result = mapServiceRequest(
      sr,
      ctx({ patient: { resource: patient, source: 'EHR Patient/dicom' } }),
      'create',
    );
    expect(result.request?.accessionNumber).toBe('A12345');
    expect(result.request?.placerOrderNumber?.value).toBe('P12345');
    expect(result.request?.fillerOrderNumber?.value).toBe('F12345');
    expect(result.request?.patient.identifiers[0]?.value).toBe('MINT1234');
    // an identifier of spaces only is no identifier (no placer number taken from it)
    sr.identifier = sr.identifier!.map((i) => ({ ...i, value: '   ' }));
    const blank = mapServiceRequest(sr, ctx(), 'create');
    expect(blank.request?.accessionNumber).toBeUndefined();
    expect(blank.request?.placerOrderNumber).toBeUndefined();
  });
});

describe('identifiers holding a control character', () => {
  it('refuses a placer or filler number or a patient identifier with a TAB, at its element, as over HL7', () => {
    // Before: the placer number `P12345<TAB>` and the patient identifier were taken as sent;
    // no later request or study could name them. One rule for every identifier and transport.
    const base = fixture<ServiceRequest>('imaging-ig-servicerequest-example').identifier!;
    for (const type of ['PLAC', 'FILL']) {
      const sr = fixture<ServiceRequest>('r4-servicerequest-example-di');
      sr.identifier = base.map((i) =>
        i.type?.coding?.[0]?.code === type ? { ...i, value: `${i.value!}\t` } : i,
      );
      const result = mapServiceRequest(sr, ctx(), 'create');
      expect(result.outcome).toBe('error');
      expect(result.issues).toContainEqual(
        expect.objectContaining({
          severity: 'error',
          expression: expect.stringMatching(/^ServiceRequest\.identifier\[\d\]/),
          diagnostics: expect.stringContaining('control character'),
        }),
      );
    }
    const patient = fixture<Patient>('r4-patient-example-dicom');
    patient.identifier = patient.identifier!.map((i) => ({ ...i, value: `${i.value!}\r` }));
    const sr = fixture<ServiceRequest>('r4-servicerequest-example-di');
    const result = mapServiceRequest(
      sr,
      ctx({ patient: { resource: patient, source: 'EHR Patient/dicom' } }),
      'create',
    );
    expect(result.outcome).toBe('error');
    expect(result.issues.map((i) => i.diagnostics).join(' ')).toContain('control character');
  });
});

describe('who issued the accession number', () => {
  it('reads the ACSN identifier’s system (universal ID) and assigner (local namespace)', () => {
    const sr = fixture<ServiceRequest>('r4-servicerequest-example-di');
    sr.identifier = [
      {
        type: {
          coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'ACSN' }],
        },
        system: 'urn:oid:1.2.826.0.1.3680043.10.42',
        value: 'A12345',
        assigner: { display: 'RIS_A' },
      },
    ];
    const result = mapServiceRequest(sr, ctx(), 'create');
    expect(result.request?.accessionIssuer).toEqual({
      universalId: 'urn:oid:1.2.826.0.1.3680043.10.42',
      universalIdType: 'ISO',
      namespace: 'RIS_A',
    });
    expect(result.lineage.filter((l) => l.target.startsWith('accessionIssuer'))).toHaveLength(2);
    // an accession without a system or assigner: no issuer, the study's is not compared
    delete sr.identifier[0]!.system;
    delete sr.identifier[0]!.assigner;
    expect(mapServiceRequest(sr, ctx(), 'create').request?.accessionIssuer).toBeUndefined();
  });
});
