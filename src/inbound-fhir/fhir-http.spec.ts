import { Readable } from 'node:stream';
import type { Request } from 'express';
import { assertJsonCost, parseResource, readRawBody } from './fhir-http';
import { FhirError } from './fhir.error';

/** The cost bound read off the bytes before anything parses them (FHIR_MAX_JSON_VALUES). */
describe('assertJsonCost', () => {
  const cost = (text: string, max: number): string | undefined => {
    try {
      assertJsonCost(Buffer.from(text, 'utf8'), max);
      return undefined;
    } catch (error) {
      expect(error).toBeInstanceOf(FhirError);
      expect((error as FhirError).httpStatus).toBe(413);
      expect((error as FhirError).issues[0]).toMatchObject({ code: 'too-costly' });
      return (error as FhirError).message;
    }
  };

  it('counts values as JSON holds them: containers and commas outside strings', () => {
    // {"a":[1,2,3],"b":"x"}: the object, the array, 1, 2, 3 and "x" are 6 values (keys are not)
    const text = '{"a":[1,2,3],"b":"x"}';
    expect(cost(text, 6)).toBeUndefined();
    expect(cost(text, 5)).toMatch(/more than 5 JSON values \(FHIR_MAX_JSON_VALUES\)/);
  });

  it('does not count the marks inside strings, escaped quotes included, nor multi-byte UTF-8', () => {
    const text = JSON.stringify({ text: 'a, b, [c], {d}, "e", \\ ,,,,', name: 'Müller, 田中, ☃' });
    expect(cost(text, 3)).toBeUndefined();
  });

  it('refuses nesting deeper than 100 levels, in any mix of objects and arrays', () => {
    const deep = (n: number) => '{"a":['.repeat(n / 2) + '1' + ']}'.repeat(n / 2);
    expect(cost(deep(100), 1_000)).toBeUndefined();
    expect(cost(deep(102), 1_000)).toMatch(/nests deeper than 100 levels/);
  });

  it('parseResource checks the cost before parsing: a too costly body is 413 even if it is not JSON', () => {
    const many = `{"resourceType":"Basic","x":[${'1,'.repeat(50)}`;
    expect(() => parseResource(Buffer.from(many), 20)).toThrow(/more than 20 JSON values/);
    expect(() =>
      parseResource(Buffer.from('{"resourceType":"Basic","x":[1,2]}'), 20),
    ).not.toThrow();
  });
});

describe('readRawBody', () => {
  const request = (chunks: Buffer[]) =>
    Object.assign(Readable.from(chunks), { headers: {} }) as unknown as Request;

  it('refuses a body over the limit with 413, issue too-long on (body) (it named no element and was too-costly)', async () => {
    const refused = await readRawBody(request([Buffer.alloc(4), Buffer.alloc(4)]), 6).catch(
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(FhirError);
    expect((refused as FhirError).httpStatus).toBe(413);
    expect((refused as FhirError).issues).toEqual([
      expect.objectContaining({ code: 'too-long', expression: ['(body)'] }),
    ]);
    expect((await readRawBody(request([Buffer.alloc(3), Buffer.alloc(3)]), 6)).bytes).toHaveLength(
      6,
    );
  });
});
