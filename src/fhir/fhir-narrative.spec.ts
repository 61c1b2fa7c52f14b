import { narrativeProblem } from './fhir-narrative';

const div = (inner: string) => `<div xmlns="http://www.w3.org/1999/xhtml">${inner}</div>`;

describe('narrativeProblem (R4 narrative.html#xhtml, txt-1)', () => {
  it('takes the narratives R4 examples carry', () => {
    expect(
      narrativeProblem(
        div('<p><b>Generated Narrative</b></p><p><b>code</b>: Chest CT <span>(LOINC)</span></p>'),
      ),
    ).toBeUndefined();
    expect(
      narrativeProblem(
        `<div xmlns='http://www.w3.org/1999/xhtml'><table><tr><td><a href="#x">x</a></td></tr></table><img src="#p"/></div>\n`,
      ),
    ).toBeUndefined();
    // Text that only looks like an attribute is text.
    expect(narrativeProblem(div('<p>onset= 3 days; see javascript: notes</p>'))).toBeUndefined();
  });

  it('refuses what R4 forbids: another root, scripts, event attributes, script URLs, forms, frames', () => {
    expect(narrativeProblem('<p>no div</p>')).toMatch(/one <div xmlns/);
    expect(narrativeProblem('<div><p>no namespace</p></div>')).toMatch(/one <div xmlns/);
    expect(narrativeProblem(div('<script>alert(1)</script>'))).toMatch(/<script>/);
    expect(narrativeProblem(div('<img src="x" onerror="alert(2)"/>'))).toMatch(/event attribute/);
    expect(narrativeProblem(div('<a href=" javascript:alert(3)">x</a>'))).toMatch(/script URL/);
    expect(narrativeProblem(div('<form action="https://x"><input/></form>'))).toMatch(/<form>/);
    expect(narrativeProblem(div('<iframe src="https://x"></iframe>'))).toMatch(/<iframe>/);
    expect(narrativeProblem(`${div('<p>x</p>')}<script>x</script>`)).toMatch(/end with/);
  });

  it('reads a hostile narrative in linear time', () => {
    const started = process.hrtime.bigint();
    narrativeProblem(div('<a'.repeat(200_000)));
    narrativeProblem(div(`<a src=${' '.repeat(200_000)}`));
    expect(Number(process.hrtime.bigint() - started) / 1e6).toBeLessThan(1_000);
  });
});
