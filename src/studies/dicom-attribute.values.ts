import { withoutPadding } from '../mappings/dicom-identifiers';
import { withoutTrailing } from '../common/padding';
import { composedIdentifier } from '../domain/identifier-form';

/**
 * The values of the top-level attributes the instance check reads (dicom-instance.validator.ts),
 * as the file holds them: padding removed (PS3.5 §6.2), identifiers and UIDs whole.
 */

/** A top-level attribute as read: its values, split at the backslash (PS3.5 §6.4). */
export interface Attribute {
  Value: Array<string | number>;
}
export type DataSet = Record<string, Attribute>;

/**
 * Rows × Columns × Number of Frames × Samples per Pixel × Bits Allocated / 8 (PS3.5 §8.1.1).
 * YBR_FULL_422 (and the retired YBR_PARTIAL_422) store two samples per pixel, not three: each
 * pair of pixels is Y1 Y2 CB CR (PS3.3 C.7.6.3.1.2). Counted as three, pydicom's
 * SC_ybr_full_422_uncompressed.dcm shape (an ultrasound frame as some carts write it
 * uncompressed) was refused as "pixel data incomplete".
 */
export function expectedNativePixelBytes(d: DataSet): number | undefined {
  const rows = num(d['00280010']);
  const columns = num(d['00280011']);
  const bits = num(d['00280100']);
  if (!rows || !columns || !bits) return undefined;
  const declared = num(d['00280002']) ?? 1;
  const subsampled = /^YBR_(FULL|PARTIAL)_422$/.test(text(d['00280004']) ?? '');
  const samples = subsampled && declared === 3 ? 2 : declared;
  const frames = num(d['00280008']) ?? 1;
  return Math.ceil((rows * columns * samples * frames * bits) / 8);
}

/** The first value, without its padding (PS3.5 §6.2); undefined when empty. */
export function text(el: Attribute | undefined): string | undefined {
  const v = el?.Value[0];
  if (v === undefined) return undefined;
  // Trailing NULs and white space, the white space JavaScript's trim() knows (linear).
  let s = String(v);
  for (let before = -1; before !== s.length;) {
    before = s.length;
    s = withoutTrailing(s, '\0').trimEnd();
  }
  s = s.trim();
  return s === '' ? undefined : s;
}

/**
 * An identifier (Accession Number SH, Patient ID LO; both VM 1) as the file holds it: every
 * value, joined by the backslash it was split at, without its space padding only (a TAB or a
 * no-break space is part of the value, `withoutPadding`). `ACC1\ACC2` is not the accession `ACC1`, so
 * the patient check (study-identity.ts) compares the whole value, never its first part.
 * Composed (NFC), as the order's identifiers are (src/domain/identifier-form.ts): an
 * instance's `MÜNCHEN` written `U` + U+0308 under ISO_IR 192 is the order's `MÜNCHEN`, found
 * by it and stored so (study_instances.accession_number); the file keeps its bytes.
 */
export function identifier(el: Attribute | undefined): string | undefined {
  const s = composedIdentifier(withoutPadding((el?.Value ?? []).map(String).join('\\')));
  return s === '' ? undefined : s;
}

/**
 * A UI value as the file holds it (no character a UID may not contain is dropped), without
 * its padding. Several values stay joined by a backslash, which no UID contains.
 */
export function uidText(el: Attribute | undefined): string | undefined {
  const joined = (el?.Value ?? []).map((v) => withoutTrailing(String(v), '\0 ')).join('\\');
  return joined === '' ? undefined : joined;
}

export function num(el: Attribute | undefined): number | undefined {
  const v = el?.Value[0];
  const n = typeof v === 'number' ? v : typeof v === 'string' && v.trim() !== '' ? Number(v) : NaN;
  return Number.isFinite(n) ? n : undefined;
}

/**
 * The alphabetic component group of a PN value (`Family^Given^^^=Ideographic=Phonetic`,
 * PS3.5 §6.2.1). Trailing empty components carry no meaning (PS3.5 §6.2.1.1) and are
 * dropped, so `Doe^Jane^^^` equals `Doe^Jane`. A name written only in its ideographic or
 * phonetic group (`=山田^太郎`, as some Japanese sites do) keeps its groups, the empty
 * alphabetic one included: it was read as no name at all, and the SR went back nameless.
 */
export function personName(el: Attribute | undefined): string | undefined {
  const v = el?.Value[0];
  if (typeof v !== 'string') return undefined;
  const groups = withoutTrailing(v, '\0')
    .split('=')
    .slice(0, 3)
    .map((g) => withoutTrailing(g.trim(), '^'));
  if (groups[0] !== '') return groups[0];
  while (groups.length > 0 && groups[groups.length - 1] === '') groups.pop();
  return groups.length === 0 ? undefined : groups.join('=');
}
