import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import * as ts from 'typescript';

/**
 * Every refusal the HL7 intake can give, found in the source: an error condition (table 0357:
 * an object with a numeric `code` and a `message`, or a `refused(...)` of the transform kit)
 * that is, or can be, of severity E. A v2.1-2.4 ACK has room for 80 characters of it (MSA-3,
 * ST 80): the ACK builder writes the sentence when it fits, else its `brief`, advice first.
 * A refusal whose text is not a fixed string of at most 80 characters must carry a brief, or
 * a v2.3 sender reads it cut mid-sentence, the advice lost (hl7-ack.builder.ts errorText).
 */
const ROOT = join(__dirname, '..', '..');
const PLACES = [
  'src/hl7',
  'src/inbound-hl7',
  'src/mappings',
  'src/domain/identifier-bounds.ts',
] as const;
const MSA_3 = 80;

function files(at: string): string[] {
  const full = join(ROOT, at);
  if (full.endsWith('.ts')) return [full];
  return readdirSync(full)
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.spec.ts'))
    .filter((f) => !f.startsWith('fhir-')) // the FHIR intake answers with OperationOutcome
    .map((f) => join(full, f));
}

interface Refusal {
  where: string;
  text: string;
  fixed?: string;
  brief: boolean;
}

/** A string whose text is known: a literal, or a template without substitutions. */
function fixedText(node: ts.Expression | undefined): string | undefined {
  if (!node) return undefined;
  if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) return node.text;
  if (ts.isParenthesizedExpression(node)) return fixedText(node.expression);
  return undefined;
}

/** Whether a severity initializer can be E ('E', 'E' as const, x ? 'W' : 'E'). */
function canBeError(node: ts.Expression): boolean {
  return /'E'/.test(node.getText());
}

function refusalsIn(file: string): Refusal[] {
  const source = ts.createSourceFile(
    file,
    readFileSync(file, 'utf8'),
    ts.ScriptTarget.Latest,
    true,
  );
  const out: Refusal[] = [];
  const where = (n: ts.Node) =>
    `${relative(ROOT, file)}:${source.getLineAndCharacterOfPosition(n.getStart()).line + 1}`;
  const visit = (node: ts.Node) => {
    if (ts.isObjectLiteralExpression(node)) {
      const props = new Map<string, ts.Expression>();
      let spreadBrief = false;
      for (const p of node.properties) {
        if (ts.isPropertyAssignment(p) && ts.isIdentifier(p.name))
          props.set(p.name.text, p.initializer);
        if (ts.isShorthandPropertyAssignment(p)) props.set(p.name.text, p.name);
        if (ts.isSpreadAssignment(p) && /\bbrief\b/.test(p.getText())) spreadBrief = true;
      }
      const code = props.get('code');
      const severity = props.get('severity');
      const message = props.get('message');
      const isCondition =
        code !== undefined && /^\d{3}\b/.test(code.getText()) && message !== undefined;
      // identifier-bounds.ts: `refuse` becomes an E condition at the field (102)
      const isBound = severity !== undefined && /'refuse'/.test(severity.getText());
      if (
        message &&
        (isBound || (isCondition && (severity === undefined || canBeError(severity))))
      ) {
        out.push({
          where: where(node),
          text: message.getText(),
          fixed: fixedText(message),
          brief: props.has('brief') || spreadBrief,
        });
      }
    }
    // a parse bound or a line that cannot be placed (hl7-parse-limits.ts): AR, as an E condition
    if (
      ts.isCallExpression(node) &&
      ts.isIdentifier(node.expression) &&
      node.expression.text === 'violation'
    ) {
      out.push({
        where: where(node),
        text: node.arguments[2]?.getText() ?? '',
        fixed: fixedText(node.arguments[2]),
        brief: node.arguments.length >= 4,
      });
    }
    if (
      ts.isCallExpression(node) &&
      ts.isIdentifier(node.expression) &&
      node.expression.text === 'refused'
    ) {
      out.push({
        where: where(node),
        text: node.arguments[2]?.getText() ?? '',
        fixed: fixedText(node.arguments[2]),
        brief: node.arguments.length >= 4,
      });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return out;
}

const REFUSALS = PLACES.flatMap(files).flatMap(refusalsIn);

describe('every HL7 intake refusal fits a v2.1-2.4 MSA-3 (80 characters) or carries a brief', () => {
  it('finds the refusals (the scan itself works)', () => {
    expect(REFUSALS.length).toBeGreaterThan(25);
    expect(REFUSALS.some((r) => r.where.includes('hl7-structure.validator.ts'))).toBe(true);
    expect(REFUSALS.some((r) => r.where.includes('hl7-order.pipeline.ts'))).toBe(true);
    expect(REFUSALS.some((r) => r.where.includes('identifier-bounds.ts'))).toBe(true);
    expect(REFUSALS.some((r) => r.where.includes('hl7-parse-limits.ts'))).toBe(true);
  });

  it('none can exceed 80 characters without a brief', () => {
    const cut = REFUSALS.filter(
      (r) => !r.brief && (r.fixed === undefined || [...r.fixed].length > MSA_3),
    ).map((r) => `${r.where}: ${r.text}`);
    expect(cut).toEqual([]);
  });
});
