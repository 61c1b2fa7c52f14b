/**
 * The Failed SOP Sequence (0008,1198) of a STOW-RS answer (PS3.18 10.5.3), in either of the
 * two forms a PACS may answer in: DICOM JSON (PS3.18 Annex F) or the Native DICOM Model XML
 * (PS3.19 A.1). We ask for JSON; a PACS that answers XML all the same (older dcm4chee, some
 * vendor archives) had its refusals read as none: a 202 or 409 whose only instance was
 * refused became "stored".
 */
export interface FailedSop {
  sopInstanceUid?: string;
  reason?: number;
}

/** Failed SOP Sequence items with their Failure Reason (0008,1197), whichever the form. */
export function failedSops(contentType: string | undefined, text: string): FailedSop[] {
  const xml = /\bxml\b/i.test(contentType ?? '') || /^\s*</.test(text);
  return xml ? failedSopsFromXml(text) : failedSopsFromJson(text);
}

function failedSopsFromJson(text: string): FailedSop[] {
  try {
    const json = JSON.parse(text) as Record<
      string,
      { Value?: Array<Record<string, { Value?: unknown[] }>> }
    >;
    return (json['00081198']?.Value ?? []).map((i) => ({
      sopInstanceUid: i['00081155']?.Value?.[0] as string | undefined,
      reason: usValue(i['00081197']?.Value?.[0]),
    }));
  } catch {
    return [];
  }
}

/** Tags, text and the end of the document: one pass, no backtracking (the answer is ≤ 1 MiB). */
const TOKEN = /<(\/?)([A-Za-z][\w.:-]*)([^<>]*)>|<[?!][^<>]*>|([^<]+)/g;
const TAG_ATTRIBUTE = /\btag\s*=\s*["']([0-9A-Fa-f]{8})["']/;

/**
 * PS3.19 A.1: NativeDicomModel > DicomAttribute tag="00081198" > Item > DicomAttribute
 * tag="00081155" | "00081197" > Value. Read with a stack of the open elements, relative to the
 * sequence (whether or not the root element is there); an item of a sequence nested deeper
 * inside an item is not taken for one of ours.
 */
function failedSopsFromXml(text: string): FailedSop[] {
  const open: Array<{ name: string; tag?: string }> = [];
  const out: FailedSop[] = [];
  let item: FailedSop | undefined;
  let itemDepth = 0; // elements open once the item is
  let value = '';
  for (const m of text.matchAll(TOKEN)) {
    const [, closing, name, attributes, chars] = m;
    if (chars !== undefined) {
      if (open.at(-1)?.name === 'Value') value += chars;
      continue;
    }
    if (name === undefined) continue; // <?xml …?>, <!-- … -->
    if (closing) {
      const ended = open.pop();
      if (item && ended?.name === 'Value' && open.length === itemDepth + 1) {
        const holder = open.at(-1)?.tag;
        const v = decodeEntities(value).trim();
        if (holder === '00081155' && item.sopInstanceUid === undefined) item.sopInstanceUid = v;
        if (holder === '00081197' && item.reason === undefined) item.reason = usValue(v);
      }
      if (item && ended?.name === 'Item' && open.length === itemDepth - 1) {
        out.push(item);
        item = undefined;
      }
      continue;
    }
    if (/\/\s*$/.test(attributes ?? '')) continue; // <Value/>: nothing in it
    const parent = open.at(-1);
    open.push({ name, tag: TAG_ATTRIBUTE.exec(attributes ?? '')?.[1]?.toUpperCase() });
    if (name === 'Value') value = '';
    if (
      !item &&
      name === 'Item' &&
      parent?.name === 'DicomAttribute' &&
      parent.tag === '00081198'
    ) {
      item = {};
      itemDepth = open.length;
    }
    if (open.length > 64) return out; // nested beyond any real answer: stop reading
  }
  return out;
}

function decodeEntities(s: string): string {
  return s.replace(
    /&(?:#(\d{1,7})|#x([0-9A-Fa-f]{1,6})|(amp|lt|gt|quot|apos));/g,
    (_m, d, h, n) => {
      if (d || h) {
        const code = d ? Number(d) : parseInt(h as string, 16);
        return code <= 0x10ffff ? String.fromCodePoint(code) : '';
      }
      return { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" }[n as string] ?? '';
    },
  );
}

/**
 * A US value (0–65535): a JSON number (PS3.18 F.2.3.1), or a string of decimal digits as some
 * servers write numbers (and as XML always does); anything else is no reason.
 */
function usValue(value: unknown): number | undefined {
  const n = typeof value === 'string' && /^\d{1,5}$/.test(value.trim()) ? Number(value) : value;
  return typeof n === 'number' && Number.isInteger(n) && n >= 0 && n <= 0xffff ? n : undefined;
}
