import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { JSON_INDENT_DEPTH, prettyJson } from './audit-presenter.raw';
import { rawView } from './audit-presenter';

describe('raw message view', () => {
  it('shows FHIR as formatted JSON, masked', () => {
    // R4 ServiceRequest transaction Bundle shape (servicerequest.html, patient.html)
    const bundle = {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        {
          resource: {
            resourceType: 'Patient',
            identifier: [{ system: 'urn:oid:1.2.250.1.71.4.2.2', value: '7800123' }],
            name: [{ family: 'DUBOIS', given: ['Hélène'] }],
            birthDate: '1985-07',
          },
        },
      ],
    };
    const bytes = Buffer.from(JSON.stringify(bundle));
    const masked = rawView(bytes, 'application/fhir+json; charset=utf-8', false);
    expect(masked.format).toBe('json');
    expect(masked.format === 'json' && masked.text).toContain('\n  "resourceType": "Bundle"');
    expect(masked.format === 'json' && masked.text).not.toMatch(/DUBOIS|Hélène|7800123|1985-07"/);
    const revealed = rawView(bytes, 'application/fhir+json', true);
    expect(revealed.format === 'json' && revealed.text).toContain('DUBOIS');
  });

  it('shows HL7 segment by segment with positions, decoding the declared charset', () => {
    // v2.4 Latin-1 feed (MSH-18 8859/1): Ü must come out as Ü, not as a replacement character
    const text =
      'MSH|^~\\&|ORBIS|KLINIKUM_NORD|KI|RAD|20230611083512||ORM^O01^ORM_O01|ORB1|P|2.4|||||DEU|8859/1\r' +
      'PID|1||KN-55120^^^KN^PI||MÜLLER^JÜRGEN||19620330|M\r';
    const view = rawView(Buffer.from(text, 'latin1'), 'application/hl7-v2', true);
    if (view.format !== 'hl7') throw new Error('expected hl7');
    const msh = view.segments[0]!;
    expect(msh.fields.slice(0, 3)).toEqual([
      { position: 'MSH-1', name: 'Field Separator', value: '|' },
      { position: 'MSH-2', name: 'Encoding Characters', value: '^~\\&' },
      { position: 'MSH-3', name: 'Sending Application', value: 'ORBIS' },
    ]);
    const pid = view.segments[1]!;
    expect(pid.fields.find((f) => f.position === 'PID-5')).toEqual({
      position: 'PID-5',
      name: 'Patient Name',
      value: 'MÜLLER^JÜRGEN',
    });
    const masked = rawView(Buffer.from(text, 'latin1'), 'application/hl7-v2', false);
    if (masked.format !== 'hl7') throw new Error('expected hl7');
    expect(masked.segments[1]!.fields.find((f) => f.position === 'PID-5')!.value).toBe('M***^J***');
  });

  it('hides bytes it cannot show structured while masked', () => {
    expect(rawView(Buffer.from('not hl7 at all'), 'application/hl7-v2', false)).toEqual({
      format: 'text',
      text: '(not an HL7 message; hidden while masked)',
    });
  });
});

describe('prettyJson', () => {
  it('writes what JSON.stringify(value, null, 2) writes for a real resource', () => {
    const bundle = JSON.parse(
      readFileSync(
        join(__dirname, '../../test/fixtures/fhir/us-core-chest-ct-transaction.json'),
        'utf8',
      ),
    ) as unknown;
    expect(prettyJson(bundle)).toBe(JSON.stringify(bundle, null, 2));
    expect(prettyJson({ a: [], b: {}, c: null, d: undefined, e: [1, 'x'] })).toBe(
      JSON.stringify({ a: [], b: {}, c: null, d: undefined, e: [1, 'x'] }, null, 2),
    );
  });

  it('is linear in the depth: levels past JSON_INDENT_DEPTH are compact', () => {
    let deep: unknown = [];
    for (let i = 0; i < 2_000; i++) deep = [{ url: 'x', extension: deep }];
    const text = prettyJson(deep);
    expect(text.length).toBeLessThan(2 * JSON.stringify(deep).length);
    // compared as JSON text: jest's recursive toEqual can run out of stack 4,000 levels down
    expect(JSON.stringify(JSON.parse(text))).toBe(JSON.stringify(deep));
    expect(text.split('\n').length).toBeLessThanOrEqual(3 * JSON_INDENT_DEPTH);
  });
});
