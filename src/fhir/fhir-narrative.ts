/**
 * R4 Narrative.div (narrative.html#xhtml, invariants txt-1 and txt-3): an XHTML `<div>` in the
 * XHTML namespace holding only basic formatting; it "SHALL NOT contain a head, a body,
 * external stylesheet references, scripts, forms, base/link/xlink, frames, iframes and
 * objects", and no event attributes. The structure validator takes any string, so a
 * ServiceRequest whose narrative carried `<script>` or `<img onerror=…>` was stored and served
 * back as it came by GET /fhir/ServiceRequest/{id}, to SMART apps that render narratives.
 *
 * Linear scans only (no backtracking over the body): the first tag is read by indexOf, each
 * tag by one non-nested regular expression.
 */

/** Elements R4 forbids in a narrative (txt-1), and the document-level ones a div cannot hold. */
const FORBIDDEN_ELEMENTS = new Set([
  'script',
  'iframe',
  'frame',
  'frameset',
  'object',
  'embed',
  'applet',
  'form',
  'input',
  'button',
  'select',
  'textarea',
  'base',
  'link',
  'meta',
  'head',
  'body',
  'html',
]);

const XHTML_NS = 'http://www.w3.org/1999/xhtml';

/** Why a Narrative.div breaks R4, or undefined when it does not. */
export function narrativeProblem(div: string): string | undefined {
  const start = div.trimStart();
  const end = start.indexOf('>');
  const first = end < 0 ? '' : start.slice(0, end + 1);
  const inNamespace = first.includes(`"${XHTML_NS}"`) || first.includes(`'${XHTML_NS}'`);
  if (!/^<div[\s>/]/.test(first) || !inNamespace) {
    return `the narrative must be one <div xmlns="${XHTML_NS}"> element (R4 narrative.html#xhtml)`;
  }
  if (!/<\/div>\s*$/.test(start)) {
    return 'the narrative must end with its </div> (R4 narrative.html#xhtml)';
  }
  for (const tag of start.matchAll(/<([A-Za-z][A-Za-z0-9:-]*)([^<>]*)>/g)) {
    const name = tag[1]!.toLowerCase();
    const attributes = tag[2] ?? '';
    if (FORBIDDEN_ELEMENTS.has(name.replace(/^.*:/, ''))) {
      return `the narrative holds a <${name}> element, which R4 forbids (txt-1: no scripts, forms, frames, objects, base/link)`;
    }
    if (/(^|[\s"'/])on[a-z]+\s*=/i.test(attributes)) {
      return `the narrative's <${name}> carries an event attribute (on…=), which R4 forbids (txt-1)`;
    }
    if (/(href|src)\s*=[\s"']*(javascript|vbscript|data:text\/html)/i.test(attributes)) {
      return `the narrative's <${name}> links to a script URL, which R4 forbids (txt-1)`;
    }
  }
  return undefined;
}
