import { identifierBoundProblems, unmatchableIdentifierProblems } from './identifier-bounds';

describe('identifierBoundProblems', () => {
  const lineage = [
    { target: 'placerOrderNumber.value', source: 'ORC-2.1', value: '', ruleId: 'r' },
    { target: 'accessionNumber', source: 'OBR-18', value: '', ruleId: 'r' },
  ];

  it('refuses an order identifier over 199 characters, naming where it was read and its length', () => {
    const [p] = identifierBoundProblems(
      { action: 'create', placerOrderNumber: { value: 'P'.repeat(200) } },
      lineage,
    );
    expect(p).toMatchObject({
      target: 'placerOrderNumber.value',
      source: 'ORC-2.1',
      severity: 'refuse',
    });
    expect(p!.message).toMatch(/^ORC-2\.1: the placer order number is 200 characters/);
    expect(p!.message).not.toContain('PPP');
  });

  it('takes 199 characters (counted in code points), warns on an accession of 17 to 199', () => {
    const astral = '😀'.repeat(199);
    expect(
      identifierBoundProblems(
        { action: 'create', placerOrderNumber: { value: astral }, accessionNumber: 'A'.repeat(16) },
        lineage,
      ),
    ).toEqual([]);
    expect(
      identifierBoundProblems({ action: 'update', accessionNumber: 'ACC-20240318-0042' }, lineage),
    ).toEqual([expect.objectContaining({ target: 'accessionNumber', severity: 'warn' })]);
    expect(
      identifierBoundProblems({ action: 'create', accessionNumber: 'A'.repeat(200) }, lineage),
    ).toEqual([expect.objectContaining({ severity: 'refuse' })]);
  });

  it('counts the characters of the composed form (NFC), however the sender wrote them', () => {
    // 16 characters, 20 code points decomposed (Ü, Ä, Ö, Ü each a letter + U+0308): a DICOM SH holds it
    const accession = 'MÜNCHEN-ÄÖÜ-1234'.normalize('NFD');
    expect([...accession]).toHaveLength(20);
    expect(
      identifierBoundProblems({ action: 'create', accessionNumber: accession }, lineage),
    ).toEqual([]);
    // 150 letters with a diaeresis: 300 code points decomposed, within the 199
    const placer = 'Ü'.repeat(150).normalize('NFD');
    expect(
      identifierBoundProblems({ action: 'create', placerOrderNumber: { value: placer } }, lineage),
    ).toEqual([]);
  });

  it('holds a cancel to nothing: it names an order and makes none', () => {
    expect(
      identifierBoundProblems(
        { action: 'cancel', fillerOrderNumber: { value: 'F'.repeat(5000) } },
        lineage,
      ),
    ).toEqual([]);
  });
});

describe('unmatchableIdentifierProblems', () => {
  const lineage = [
    { target: 'placerOrderNumber.value', source: 'ORC-2.1', value: '', ruleId: 'r' },
    { target: 'accessionNumber', source: 'OBR-18', value: '', ruleId: 'r' },
  ];
  const cancel = {
    action: 'cancel' as const,
    placerOrderNumber: { value: 'PLC\t1' },
    accessionNumber: 'ACC\u00071',
    patient: { identifiers: [{ value: 'PAT\r1' }] },
  };

  it("names a cancel's order numbers (order) or patient identifiers (patient), never the rest", () => {
    expect(identifierBoundProblems(cancel, lineage)).toEqual([]);
    expect(unmatchableIdentifierProblems(cancel, lineage, 'order').map((p) => p.source)).toEqual([
      'ORC-2.1',
    ]);
    expect(unmatchableIdentifierProblems(cancel, lineage, 'patient').map((p) => p.target)).toEqual([
      'patient.identifiers[0].value',
    ]);
  });
});
