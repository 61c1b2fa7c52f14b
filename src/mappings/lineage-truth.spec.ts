import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { Bundle, ImagingStudy, Patient, ServiceRequest } from '@medplum/fhirtypes';
import type { MappedField } from '../domain/order-request';
import { DEFAULT_FHIR_ORDER_MAPPING_CONFIG } from './fhir-order.config';
import { mapServiceRequest, type FhirOrderContext } from './fhir-order.mapping';
import { DEFAULT_HL7_ORDER_MAPPING_CONFIG } from './hl7-order.config';
import { mapHl7Message } from './hl7-order.mapping';
import { parseHl7 } from '../hl7/hl7-message';
import { DEFAULT_PRODUCTS_RULE_ID } from './product-table';

/**
 * Lineage tells the truth: every lineage line's value is the value stored at its target in the
 * OrderRequest (issue #18 item 6), for every HL7 golden and every FHIR ServiceRequest fixture.
 * A converted value names the rule that converted it (the table row for lookups).
 */

const HL7 = path.join(__dirname, '../../test/fixtures/hl7');
const EXPECTED = path.join(HL7, 'expected');
const FHIR = path.join(__dirname, '../../test/fixtures/fhir');

function at(obj: unknown, target: string): unknown {
  let v: unknown = obj;
  for (const key of target.replace(/\[(\d+)\]/g, '.$1').split('.')) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<string, unknown>)[key];
  }
  return v;
}

function untrue(stored: unknown, lineage: MappedField[]): string[] {
  return lineage
    .filter((l) => at(stored, l.target) !== l.value)
    .map(
      (l) =>
        `${l.target} ← ${l.source}: lineage ${l.value}, stored ${String(at(stored, l.target))}`,
    );
}

describe('lineage values are the stored values (HL7 goldens)', () => {
  const goldens = readdirSync(EXPECTED).filter((f) => f.endsWith('.json'));
  it.each(goldens)('%s', (file) => {
    const golden = JSON.parse(readFileSync(path.join(EXPECTED, file), 'utf8')) as {
      orders: Array<{ request: unknown; lineage: MappedField[] }>;
      patientEvents: Array<{ patient: unknown; lineage: MappedField[] }>;
    };
    for (const o of golden.orders) expect(untrue(o.request, o.lineage)).toEqual([]);
    for (const e of golden.patientEvents) expect(untrue(e, e.lineage)).toEqual([]);
  });

  it('the product row of an HL7 order names the product and the table row', () => {
    const result = mapHl7Message(
      parseHl7(readFileSync(path.join(HL7, 'omi-o23-v28-multi-order.hl7'))),
    );
    expect(result.orders[1]!.lineage).toContainEqual({
      target: 'products[0]',
      source: 'OBR[2]-4.1',
      value: 'brain-mr-volumetry',
      ruleId: 'hl7.order.products',
      rule: 'product-table: 24590-2^LN → brain-mr-volumetry',
    });
  });

  it('the unknown-procedure default has one rule id, with or without OBR-4', () => {
    const config = {
      ...DEFAULT_HL7_ORDER_MAPPING_CONFIG,
      unknownProcedure: { kind: 'default-products' as const, products: ['general-triage'] },
    };
    const text = readFileSync(path.join(HL7, 'orm-o01-v231-unknown-procedure.hl7'), 'latin1');
    const unknown = mapHl7Message(parseHl7(text), config).orders[0]!;
    const withoutObr4 = mapHl7Message(
      parseHl7(text.replace(/^(OBR\|[^|]*\|[^|]*\|[^|]*\|)[^|]*/m, '$1')),
      config,
    ).orders[0]!;
    for (const order of [unknown, withoutObr4]) {
      const line = order.lineage.find((l) => l.target === 'products[0]')!;
      expect(line).toMatchObject({ value: 'general-triage', ruleId: DEFAULT_PRODUCTS_RULE_ID });
      expect(line.rule).toMatch(/^unknown-procedure: .* → default-products general-triage$/);
      expect(untrue(order.request, order.lineage)).toEqual([]);
    }
  });
});

describe('lineage values are the stored values (FHIR fixtures)', () => {
  const json = <T>(name: string): T => JSON.parse(readFileSync(path.join(FHIR, name), 'utf8')) as T;
  const patient = {
    resource: json<Patient>('r4-patient-example-dicom.json'),
    source: 'EHR Patient/dicom',
  };
  const bundle = json<Bundle>('us-core-chest-ct-transaction.json');
  const fromBundle = <T>(type: string): T =>
    bundle.entry!.find((e) => e.resource?.resourceType === type)!.resource as T;
  const cases: Array<[string, ServiceRequest, FhirOrderContext]> = [
    ...readdirSync(FHIR)
      .filter((f) => f.includes('servicerequest'))
      .map(
        (f) =>
          [f, json<ServiceRequest>(f), { patient, imagingStudies: [], reasons: new Map() }] as [
            string,
            ServiceRequest,
            FhirOrderContext,
          ],
      ),
    [
      'us-core-chest-ct-transaction.json',
      fromBundle<ServiceRequest>('ServiceRequest'),
      {
        patient: { resource: fromBundle<Patient>('Patient'), source: 'Bundle Patient' },
        imagingStudies: [
          {
            resource: fromBundle<ImagingStudy>('ImagingStudy'),
            source: 'Bundle ImagingStudy',
          },
        ],
        reasons: new Map(),
      } as unknown as FhirOrderContext,
    ],
  ];
  it.each(cases)('%s', (_name, sr, ctx) => {
    for (const config of [
      DEFAULT_FHIR_ORDER_MAPPING_CONFIG,
      {
        ...DEFAULT_FHIR_ORDER_MAPPING_CONFIG,
        unknownProcedure: { kind: 'default-products' as const, products: ['general-triage'] },
      },
    ]) {
      const result = mapServiceRequest({ ...sr, status: 'active' }, ctx, 'create', config);
      if (!result.request) continue;
      expect(untrue(result.request, result.lineage)).toEqual([]);
      for (const line of result.lineage.filter((l) => l.target.startsWith('products['))) {
        expect(line.rule).toMatch(/^(product-table|unknown-procedure): /);
        if (line.rule!.startsWith('unknown-procedure')) {
          expect(line.ruleId).toBe(DEFAULT_PRODUCTS_RULE_ID);
        }
      }
    }
  });
});
