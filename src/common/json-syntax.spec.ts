import { describeJsonSyntaxError } from './json-syntax';

function why(text: string): string {
  try {
    JSON.parse(text);
  } catch (error) {
    return describeJsonSyntaxError(error, text);
  }
  throw new Error('parsed');
}

describe('describeJsonSyntaxError', () => {
  it('names the position of an unexpected character, never the text around it', () => {
    const text = '{\n  "name": [{\n    "family": Shaw,\n    "given": ["Amy"]\n  }]\n}';
    const at = text.indexOf('Shaw');
    expect(why(text)).toBe(`Unexpected token in JSON at position ${at} (line 3 column 15)`);
    const head = 'Shaw, Amy V. 1987-02-20 MRN 1032702 and more text';
    expect(why(head)).toBe('Unexpected token in JSON at position 0 (line 1 column 1)');
    const early = '{"a": Shaw, "b": "Amy V. 1987-02-20 and more"}';
    expect(why(early)).toBe('Unexpected token in JSON at position 6 (line 1 column 7)');
  });

  it('a short text or an excerpt found twice: no position, and still no excerpt', () => {
    expect(why('Shaw, Amy')).toMatch(/^Unexpected token: .*not repeated here/);
    const twice = '{"x": "          ", "a": None          ,"b": "          ", "a": None          }';
    expect(why(twice)).not.toContain('None');
  });

  it("keeps V8's messages that name a position and nothing of the text", () => {
    expect(why('')).toBe('Unexpected end of JSON input');
    expect(why('{"a": "Shaw" "b"}')).toBe(
      "Expected ',' or '}' after property value in JSON at position 13 (line 1 column 14)",
    );
    expect(why('{"a": "Sh\taw"}')).toMatch(
      /^Bad control character in string literal in JSON at position 9/,
    );
    expect(describeJsonSyntaxError(new Error('"Shaw" is odd'), '')).not.toContain('Shaw');
  });
});
