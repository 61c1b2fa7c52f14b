import { exchangeText, type ExchangeText } from './publisher';

interface DcmjsElement {
  vr: string;
  Value?: unknown[];
}
interface DcmjsDumpApi {
  DicomMessage: {
    readFile(
      buffer: ArrayBuffer,
      options?: { ignoreErrors?: boolean },
    ): { dict: Record<string, DcmjsElement>; meta: Record<string, DcmjsElement> };
  };
  DicomMetaDictionary: { dictionary: Record<string, { name?: string } | undefined> };
}
// eslint-disable-next-line @typescript-eslint/no-require-imports
const dcmjs = require('dcmjs') as { data: DcmjsDumpApi };

/** The content type of a tag dump in outbox.last_exchange (one element per line, JSON). */
export const DICOM_TAG_DUMP = 'application/x-dicom-tag-dump+json';

/** One element of a tag dump; `depth` counts the sequences it sits in. */
export interface TagDumpLine {
  tag: string;
  keyword: string;
  vr: string;
  depth: number;
  value: string;
}

const MAX_LINES = 2000;

/**
 * A Part 10 file as a tag dump (dcmdump style, PS3.5 section 7): every element with its tag,
 * keyword, VR and value, sequence items indented; bulk data (OB, OW, UN) as a byte count.
 */
export function dicomTagDump(part10: Buffer): ExchangeText {
  const lines: TagDumpLine[] = [];
  try {
    const ab = part10.buffer.slice(part10.byteOffset, part10.byteOffset + part10.byteLength);
    const file = dcmjs.data.DicomMessage.readFile(ab as ArrayBuffer, { ignoreErrors: true });
    walk(file.meta, 0, lines);
    walk(file.dict, 0, lines);
  } catch (error) {
    lines.push({
      tag: '',
      keyword: '(not readable)',
      vr: '',
      depth: 0,
      value: (error as Error).message.slice(0, 200),
    });
  }
  return exchangeText(DICOM_TAG_DUMP, JSON.stringify(lines));
}

function walk(dict: Record<string, DcmjsElement>, depth: number, out: TagDumpLine[]): void {
  for (const [hex, el] of Object.entries(dict)) {
    if (out.length >= MAX_LINES) return;
    const tag = `(${hex.slice(0, 4)},${hex.slice(4, 8)})`.toUpperCase();
    const keyword = dcmjs.data.DicomMetaDictionary.dictionary[tag]?.name ?? 'Unknown';
    if (el.vr === 'SQ') {
      const items = (el.Value ?? []) as Array<Record<string, DcmjsElement>>;
      out.push({ tag, keyword, vr: 'SQ', depth, value: `${items.length} item(s)` });
      for (const item of items) walk(item, depth + 1, out);
      continue;
    }
    out.push({ tag, keyword, vr: el.vr, depth, value: valueText(el) });
  }
}

function valueText(el: DcmjsElement): string {
  const values = el.Value ?? [];
  if (['OB', 'OW', 'OF', 'OD', 'OL', 'UN'].includes(el.vr)) {
    const bytes = values.reduce<number>(
      (n, v) => n + ((v as ArrayBuffer | undefined)?.byteLength ?? 0),
      0,
    );
    return `(${bytes} bytes)`;
  }
  return values
    .map((v) =>
      v !== null && typeof v === 'object'
        ? ((v as { Alphabetic?: string }).Alphabetic ?? JSON.stringify(v))
        : String(v),
    )
    .join('\\')
    .slice(0, 1000);
}
