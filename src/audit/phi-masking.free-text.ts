import { sanitizeText } from '../imaging-client/imaging-client.error';
import { maskKnownValues, NO_KNOWN_PHI, type KnownPhi } from './phi-known-values';
import { maskDate, maskName } from './phi-masking.values';

/**
 * The upstream's free text (its error messages, the reasons it gives for refused files), as
 * an analyst may see it: its body is not specified and may echo what we sent, so names
 * written `FAMILY^Given` keep their initials, dates their year, long digit runs are hidden and
 * file paths keep only segments that cannot name a person. Used where such text is written
 * (upstream refusals, the reasons on an order's timeline) and where it is shown (the error of
 * an `upstream.call`). Pure: no database, no Nest.
 */

/**
 * Free text from the upstream, with anything that may be PHI masked. `known`: the order's own
 * values (knownPhiOf), masked wherever they stand, in whatever form the patterns miss.
 */
export function maskFreeText(text: string, known: KnownPhi = NO_KNOWN_PHI): string {
  return (
    maskKnownValues(sanitizeText(text), known)
      // HL7/DICOM person names (PN): FAMILY^Given^Middle.
      .replace(/[^\s^:;,()"'[\]{}]+(?:\^[^\s^:;,()"'[\]{}]*)+/g, (pn) =>
        pn
          .split('^')
          .map((p) => (p ? maskName(p) : p))
          .join('^'),
      )
      // Dates (YYYY-MM-DD, YYYYMMDD) keep their year; not inside a dotted UID.
      .replace(/(?<![\d.])(?:19|20)\d{2}-?[01]\d-?[0-3]\d(?![\d.])/g, (d) => maskDate(d))
      // Other long digit runs (identifiers), again not inside a dotted UID.
      .replace(/(?<![\d.])\d{7,}(?![\d.])/g, '***')
      // File paths and file names inside the text, as in a `files` entry.
      .replace(/[^\s;,()"'[\]{}]*[^\s:;,()"'[\]{}]/g, (token) =>
        !/^[a-z][a-z0-9+.-]*:\/\//i.test(token) &&
        (/[/\\]/.test(token) || KNOWN_EXTENSION.test(token))
          ? maskFilePath(token)
          : token,
      )
  );
}

const KNOWN_EXTENSION = /(\.nii\.gz|\.(?:dcm|dicom|nii|bvec|bval|json|zip|txt|md|html))$/i;
const SAFE_STEM =
  /^(?:[0-9]+(?:\.[0-9]+)*|[A-Za-z]{1,4}[0-9][0-9._-]*|DICOM|DICOMDIR|metadata|sidecar|__MACOSX|uploaded object)$/;

/** A file path with every segment that could name a person reduced to its first character. */
export function maskFilePath(path: string): string {
  return path
    .split(/([/\\])/)
    .map((segment) => {
      if (
        segment === '/' ||
        segment === '\\' ||
        segment === '' ||
        segment === '.' ||
        segment === '..'
      )
        return segment;
      const ext = KNOWN_EXTENSION.exec(segment)?.[1] ?? '';
      const stem = segment.slice(0, segment.length - ext.length);
      if (SAFE_STEM.test(stem)) return segment;
      return `${[...stem][0] ?? ''}***${ext}`;
    })
    .join('');
}
