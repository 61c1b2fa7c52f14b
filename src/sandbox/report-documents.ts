import { crc32, deflateSync } from 'node:zlib';
import glyphFont from './glyphs-5x7.json';

/**
 * Renders one report in every format the contract names (PDF, PNG, JSON, XML, TXT, and CSV
 * for failure reports). Written by hand so that the bytes are real, valid documents: the PDF
 * has a correct cross-reference table, the PNG real zlib data and CRCs.
 */
export interface SandboxDocument {
  title: string;
  /** Root element name for XML. */
  xmlRoot: string;
  data: Record<string, unknown>;
  lines: string[];
  chart: { label: string; percentile: number; flag: 'normal' | 'low' | 'high' }[];
  table: string[][];
}

export type DocumentFormat = 'PDF' | 'PNG' | 'JSON' | 'XML' | 'TXT' | 'CSV';

export const CONTENT_TYPES: Record<DocumentFormat, string> = {
  PDF: 'application/pdf',
  PNG: 'image/png',
  JSON: 'application/json; charset=utf-8',
  XML: 'application/xml; charset=utf-8',
  TXT: 'text/plain; charset=utf-8',
  CSV: 'text/csv; charset=utf-8',
};

export function renderDocument(doc: SandboxDocument, format: DocumentFormat): Buffer {
  switch (format) {
    case 'PDF':
      return renderPdf(doc.title, doc.lines);
    case 'PNG':
      return renderPng(doc.title, doc.chart, doc.lines);
    case 'JSON':
      return Buffer.from(JSON.stringify(doc.data, null, 2), 'utf8');
    case 'XML':
      return Buffer.from(
        `<?xml version="1.0" encoding="UTF-8"?>\n${xmlElement(doc.xmlRoot, doc.data, '')}\n`,
        'utf8',
      );
    case 'TXT':
      return Buffer.from(
        `${doc.title}\n${'='.repeat(doc.title.length)}\n${doc.lines.join('\n')}\n`,
        'utf8',
      );
    case 'CSV':
      return Buffer.from(
        doc.table.map((row) => row.map(csvCell).join(',')).join('\r\n') + '\r\n',
        'utf8',
      );
    default:
      return format satisfies never;
  }
}

/** RFC 4180: quote cells holding comma, quote or line break; double inner quotes. */
function csvCell(v: string): string {
  return /[",\r\n]/.test(v) ? `"${v.replace(/"/g, '""')}"` : v;
}

function xmlEscape(s: string): string {
  return s
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;');
}

function xmlName(key: string): string {
  const cleaned = key.replace(/[^A-Za-z0-9_.-]/g, '_');
  return /^[A-Za-z_]/.test(cleaned) ? cleaned : `_${cleaned}`;
}

function xmlElement(name: string, value: unknown, indent: string): string {
  const tag = xmlName(name);
  if (value === null || value === undefined) return `${indent}<${tag} nil="true"/>`;
  if (Array.isArray(value)) {
    const inner = value.map((v) => xmlElement('item', v, `${indent}  `)).join('\n');
    return value.length === 0
      ? `${indent}<${tag}/>`
      : `${indent}<${tag}>\n${inner}\n${indent}</${tag}>`;
  }
  if (typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>);
    if (entries.length === 0) return `${indent}<${tag}/>`;
    return `${indent}<${tag}>\n${entries.map(([k, v]) => xmlElement(k, v, `${indent}  `)).join('\n')}\n${indent}</${tag}>`;
  }
  return `${indent}<${tag}>${xmlEscape(String(value))}</${tag}>`;
}

/** PDF literal strings: escape \, ( and ); the standard 14 fonts cover printable ASCII safely. */
function pdfText(s: string): string {
  return s
    .replace(/[^\x20-\x7e]/g, '?')
    .replace(/\\/g, '\\\\')
    .replace(/\(/g, '\\(')
    .replace(/\)/g, '\\)');
}

const LINES_PER_PAGE = 52;

/**
 * A minimal PDF 1.4 (ISO 32000-1 §7.5): catalog, page tree, two standard fonts (Helvetica-Bold
 * title, Courier body so that table columns line up), one content stream per page.
 */
export function renderPdf(title: string, lines: string[]): Buffer {
  const pages: string[][] = [];
  for (let i = 0; i < Math.max(1, lines.length); i += LINES_PER_PAGE)
    pages.push(lines.slice(i, i + LINES_PER_PAGE));
  const objects: string[] = [];
  // 1 catalog, 2 pages, 3 font regular, 4 font bold, then per page: page object + content stream.
  const pageIds = pages.map((_, i) => 5 + i * 2);
  objects[1] = '<< /Type /Catalog /Pages 2 0 R >>';
  objects[2] = `<< /Type /Pages /Kids [${pageIds.map((id) => `${id} 0 R`).join(' ')}] /Count ${pages.length} >>`;
  objects[3] = '<< /Type /Font /Subtype /Type1 /BaseFont /Courier /Encoding /WinAnsiEncoding >>';
  objects[4] =
    '<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold /Encoding /WinAnsiEncoding >>';
  pages.forEach((pageLines, i) => {
    const ops = [
      'BT',
      '/F2 14 Tf',
      '40 800 Td',
      `(${pdfText(title)}) Tj`,
      '/F1 8.5 Tf',
      '0 -24 Td',
      '12 TL',
    ];
    for (const line of pageLines) ops.push(`(${pdfText(line)}) Tj T*`);
    ops.push('ET');
    if (pages.length > 1)
      ops.push('BT /F1 8 Tf 500 30 Td', `(page ${i + 1} of ${pages.length}) Tj ET`);
    const stream = ops.join('\n');
    const pageId = pageIds[i];
    objects[pageId] =
      `<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Resources << /Font << /F1 3 0 R /F2 4 0 R >> >> /Contents ${pageId + 1} 0 R >>`;
    objects[pageId + 1] =
      `<< /Length ${Buffer.byteLength(stream, 'latin1')} >>\nstream\n${stream}\nendstream`;
  });
  let out = '%PDF-1.4\n%\xe2\xe3\xcf\xd3\n';
  const offsets: number[] = [];
  for (let id = 1; id < objects.length; id++) {
    offsets[id] = Buffer.byteLength(out, 'latin1');
    out += `${id} 0 obj\n${objects[id]}\nendobj\n`;
  }
  const xrefAt = Buffer.byteLength(out, 'latin1');
  out += `xref\n0 ${objects.length}\n0000000000 65535 f \n`;
  for (let id = 1; id < objects.length; id++)
    out += `${String(offsets[id]).padStart(10, '0')} 00000 n \n`;
  out += `trailer\n<< /Size ${objects.length} /Root 1 0 R >>\nstartxref\n${xrefAt}\n%%EOF\n`;
  return Buffer.from(out, 'latin1');
}

function pngChunk(type: string, data: Buffer): Buffer {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const typeAndData = Buffer.concat([Buffer.from(type, 'latin1'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(typeAndData) >>> 0);
  return Buffer.concat([len, typeAndData, crc]);
}

/** 5×7 bitmap glyphs for PNG labels (glyphs-5x7.json): per character, one 5-bit row per entry. */
const GLYPHS: Record<string, number[]> = Object.fromEntries(
  Object.entries(glyphFont.glyphs).map(([ch, hex]) => [
    ch,
    Array.from({ length: 7 }, (_, row) => parseInt(hex.slice(row * 2, row * 2 + 2), 16)),
  ]),
);

type Rgb = [number, number, number];

class RgbCanvas {
  readonly px: Buffer;

  constructor(
    readonly width: number,
    readonly height: number,
  ) {
    this.px = Buffer.alloc(width * height * 3, 0xff);
  }

  fill(x0: number, y0: number, w: number, h: number, rgb: Rgb): void {
    for (let y = Math.max(0, y0); y < Math.min(this.height, y0 + h); y++) {
      for (let x = Math.max(0, x0); x < Math.min(this.width, x0 + w); x++) {
        const i = (y * this.width + x) * 3;
        this.px[i] = rgb[0];
        this.px[i + 1] = rgb[1];
        this.px[i + 2] = rgb[2];
      }
    }
  }

  /** Draws upper-cased text; characters without a glyph are left blank. Returns the width used. */
  text(x: number, y: number, value: string, rgb: Rgb, scale = 1): number {
    let cx = x;
    for (const ch of value.toUpperCase()) {
      const rows = GLYPHS[ch];
      if (rows) {
        rows.forEach((bits, row) => {
          for (let col = 0; col < 5; col++)
            if (bits & (0x10 >> col))
              this.fill(cx + col * scale, y + row * scale, scale, scale, rgb);
        });
      }
      cx += 6 * scale;
    }
    return cx - x;
  }
}

/**
 * A labelled percentile chart as an 8-bit RGB PNG (ISO/IEC 15948): a title band, one
 * horizontal bar per structure on a 0–100 track with its name and percentile, grey lines at
 * the 5th, 50th and 95th percentile, bars outside the 5th–95th band in orange.
 */
export function renderPng(
  title: string,
  chart: SandboxDocument['chart'],
  lines: string[] = [],
): Buffer {
  const width = 640;
  const barH = 14;
  const gap = 14;
  const top = 44;
  // Without a chart (failure reports) the image carries the report's text lines instead.
  const textLines = chart.length === 0 ? lines.filter((l) => l.trim() !== '').slice(0, 16) : [];
  const rows = Math.max(1, chart.length, Math.ceil((textLines.length * 12) / (barH + gap)));
  const height = top + rows * (barH + gap) + 24;
  const c = new RgbCanvas(width, height);
  c.fill(0, 0, width, 30, [0x1f, 0x4e, 0x79]);
  c.text(10, 8, title.slice(0, 50), [0xff, 0xff, 0xff], 2);
  const left = 210;
  const span = 360;
  chart.forEach((bar, i) => {
    const y = top + i * (barH + gap);
    c.text(10, y + 4, bar.label.slice(0, 32), [0x20, 0x20, 0x20]);
    c.fill(left, y, span, barH, [0xe6, 0xe6, 0xe6]);
    const color: Rgb = bar.flag === 'normal' ? [0x2e, 0x8b, 0x57] : [0xe6, 0x7e, 0x22];
    const p = Math.min(100, Math.max(0, bar.percentile));
    c.fill(left, y, Math.round((span * p) / 100), barH, color);
    c.text(left + span + 8, y + 4, `P${Math.round(p)}`, [0x20, 0x20, 0x20]);
  });
  textLines.forEach((line, i) => c.text(10, top + i * 12, line.slice(0, 100), [0x20, 0x20, 0x20]));
  if (chart.length > 0)
    for (const p of [5, 50, 95])
      c.fill(
        left + Math.round((span * p) / 100),
        top - 6,
        1,
        rows * (barH + gap),
        [0x60, 0x60, 0x60],
      );
  c.text(10, height - 14, 'SANDBOX - SYNTHETIC - NOT FOR CLINICAL USE', [0x80, 0x80, 0x80]);
  const px = c.px;
  const raw = Buffer.alloc((width * 3 + 1) * height);
  for (let y = 0; y < height; y++) {
    raw[y * (width * 3 + 1)] = 0; // filter type None
    px.copy(raw, y * (width * 3 + 1) + 1, y * width * 3, (y + 1) * width * 3);
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // colour type RGB
  ihdr[10] = 0;
  ihdr[11] = 0;
  ihdr[12] = 0;
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    pngChunk('IHDR', ihdr),
    pngChunk('IDAT', deflateSync(raw)),
    pngChunk('IEND', Buffer.alloc(0)),
  ]);
}
