import {
  composedIdentifier,
  composedLineage,
  eventWithComposedIdentifiers,
  sameIdentifierText,
  withComposedIdentifiers,
} from './identifier-form';
import type { OrderRequest } from './order-request';

const d = (s: string) => s.normalize('NFD');
const c = (s: string) => s.normalize('NFC');

describe('identifier form (NFC, never NFKC)', () => {
  it('composes canonically equivalent text and keeps compatibility forms, case and spaces', () => {
    expect(composedIdentifier(d('KÖLN-É'))).toBe(c('KÖLN-É'));
    expect(sameIdentifierText(d('KÖLN'), c('KÖLN'))).toBe(true);
    expect(sameIdentifierText('ＡＣＣ１２３', 'ACC123')).toBe(false);
    expect(sameIdentifierText('ﬁ-1', 'fi-1')).toBe(false);
    expect(sameIdentifierText('acc1', 'ACC1')).toBe(false);
    expect(sameIdentifierText('KÓLN', 'KÖLN')).toBe(false);
    expect(composedIdentifier(undefined)).toBeUndefined();
    expect(composedIdentifier(null)).toBeNull();
  });

  it("composes an order's identifiers only, and the lineage of those", () => {
    const request = {
      source: 'hl7v2',
      action: 'create',
      patient: {
        identifiers: [{ value: d('PAT-É'), system: d('HÔPITAL'), type: 'MR' }],
        name: { family: d('DUBOIS-É') },
      },
      placerOrderNumber: { value: d('PL-É'), system: 'RIS' },
      fillerOrderNumber: { value: d('FI-É') },
      placerGroupNumber: { value: d('GR-É') },
      accessionNumber: d('ACC-É'),
      accessionIssuer: { namespace: d('RIS-É'), universalId: '1.2.3' },
      notes: [d('fièvre')],
      products: ['x'],
    } as OrderRequest;
    const out = withComposedIdentifiers(request);
    expect(out.patient.identifiers[0]).toEqual({
      value: c('PAT-É'),
      system: c('HÔPITAL'),
      type: 'MR',
    });
    expect(out.placerOrderNumber).toEqual({ value: c('PL-É'), system: 'RIS' });
    expect(out.fillerOrderNumber).toEqual({ value: c('FI-É') });
    expect(out.placerGroupNumber).toEqual({ value: c('GR-É') });
    expect(out.accessionNumber).toBe(c('ACC-É'));
    expect(out.accessionIssuer).toEqual({ namespace: c('RIS-É'), universalId: '1.2.3' });
    expect(out.patient.name?.family).toBe(d('DUBOIS-É'));
    expect(out.notes).toEqual([d('fièvre')]);
    expect(
      composedLineage([
        { target: 'accessionNumber', source: 'OBR-18', value: d('ACC-É'), ruleId: 'r' },
        { target: 'patient.name.family', source: 'PID-5.1', value: d('DUBOIS-É'), ruleId: 'r' },
      ]).map((l) => l.value),
    ).toEqual([c('ACC-É'), d('DUBOIS-É')]);
  });

  it("composes a merge's surviving and retired identifiers", () => {
    const event = eventWithComposedIdentifiers({
      kind: 'patient-merge',
      patient: { identifiers: [{ value: d('NEW-É') }] },
      priorIdentifiers: [{ value: d('OLD-É'), system: 'H' }],
      lineage: [],
    });
    expect(event.patient.identifiers).toEqual([{ value: c('NEW-É') }]);
    expect(event.kind === 'patient-merge' && event.priorIdentifiers).toEqual([
      { value: c('OLD-É'), system: 'H' },
    ]);
  });
});
