/**
 * The one rule for URLs the adapter dereferences (DESIGN.md §5): a URL is followed only
 * when it lies within the configured base of the peer it belongs to — same scheme, same host,
 * same port and under the base's path on a segment boundary — and a credential is attached
 * only to its own peer. Every client that follows a URL taken from an input or an answer
 * (the EHR's FHIR server, the PACS's DICOMweb server, the upstream service and its storage)
 * asks a PeerBase first.
 *
 * Comparison is on the WHATWG-parsed form (RFC 3986 §6 normalisation: scheme and host
 * case-insensitive, default ports dropped, dot segments — also percent-encoded ones —
 * resolved). What a server might decode differently from us is refused outright rather than
 * guessed: user information, encoded slashes, backslashes and encoded dots in the path,
 * control characters and white space anywhere.
 */

export class PeerUrlError extends Error {
  constructor(
    message: string,
    /** Which rule refused the URL (stable, for audit and tests). */
    readonly reason: PeerUrlRefusal,
  ) {
    super(message);
    this.name = 'PeerUrlError';
  }
}

export type PeerUrlRefusal =
  'unparseable' | 'scheme' | 'userinfo' | 'origin' | 'path' | 'ambiguous-encoding' | 'dot-segment';

export interface PeerBaseOptions {
  /**
   * Refuse a reference whose path has a `.` or `..` segment, even one that resolves within
   * the base. For a peer whose references name resources (`Type/id`: FHIR R4
   * references.html), such a segment means the URL read is not the one named: `Patient/.`
   * is `<base>/Patient/` (the search), `Patient/..` the base itself.
   */
  refuseDotSegments?: boolean;
}

/** Characters a URL taken from an input may not carry (C0 controls, DEL, white space). */
// eslint-disable-next-line no-control-regex
const FORBIDDEN_CHARS = /[\u0000-\u0020\u007f]/;
/** Encodings that servers decode inconsistently: `/`, `\`, `.` and `%` itself. */
const AMBIGUOUS_ENCODING = /%(2f|5c|2e|25)/i;

export class PeerBase {
  private readonly base: URL;
  /** The base's path, always ending in `/`. */
  private readonly prefix: string;

  /**
   * @param peer a short name for messages and audit (`EHR`, `PACS`, `upstream`)
   * @param baseUrl the configured base (e.g. FHIR_SERVER_URL)
   */
  constructor(
    readonly peer: string,
    baseUrl: string,
    private readonly options: PeerBaseOptions = {},
  ) {
    const base = new URL(baseUrl);
    if (base.protocol !== 'http:' && base.protocol !== 'https:')
      throw new Error(`${peer} base URL must be http(s)`);
    base.search = '';
    base.hash = '';
    this.base = base;
    this.prefix = base.pathname.endsWith('/') ? base.pathname : `${base.pathname}/`;
  }

  /** The base without a trailing slash (`https://ehr.example/fhir`). */
  get href(): string {
    return `${this.base.origin}${this.prefix.replace(/\/$/, '')}`;
  }

  get origin(): string {
    return this.base.origin;
  }

  /**
   * Resolves a reference (absolute, or relative to the base like `ServiceRequest/1`) and
   * returns the absolute URL when it is within this peer's base; throws PeerUrlError otherwise.
   */
  resolve(reference: string): URL {
    if (typeof reference !== 'string' || reference.length === 0 || reference.length > 8192)
      throw new PeerUrlError(`not a usable URL for ${this.peer}`, 'unparseable');
    if (FORBIDDEN_CHARS.test(reference) || reference.includes('\\'))
      throw new PeerUrlError(
        `URL for ${this.peer} contains control characters, white space or a backslash`,
        'ambiguous-encoding',
      );
    let url: URL;
    try {
      // A relative reference resolves under the base (`Type/id` → `<base>/Type/id`).
      url = new URL(reference, `${this.base.origin}${this.prefix}`);
    } catch {
      throw new PeerUrlError(`not a usable URL for ${this.peer}`, 'unparseable');
    }
    this.check(url, reference);
    return url;
  }

  /** True when `reference` resolves within this peer's base. */
  contains(reference: string): boolean {
    try {
      this.resolve(reference);
      return true;
    } catch {
      return false;
    }
  }

  /** True for a reference that names a host (`scheme://…` or `//host…`). */
  static isAbsolute(reference: string): boolean {
    return /^[a-z][a-z0-9+.-]*:/i.test(reference) || reference.startsWith('//');
  }

  private check(url: URL, original: string): void {
    if (url.protocol !== this.base.protocol)
      throw new PeerUrlError(
        `URL scheme ${url.protocol.replace(':', '')} is not that of the ${this.peer} base`,
        'scheme',
      );
    if (url.username || url.password)
      throw new PeerUrlError(`URL for ${this.peer} carries user information`, 'userinfo');
    if (url.host !== this.base.host)
      throw new PeerUrlError(`URL is on another host than the ${this.peer}`, 'origin');
    // The raw path before WHATWG resolution: encoded separators could be decoded by the
    // server after our prefix check.
    const rawPath = original.split(/[?#]/, 1)[0];
    if (AMBIGUOUS_ENCODING.test(rawPath) || AMBIGUOUS_ENCODING.test(url.pathname))
      throw new PeerUrlError(
        `URL path for ${this.peer} carries an encoded slash, backslash, dot or percent`,
        'ambiguous-encoding',
      );
    const path = url.pathname;
    if (path !== this.prefix.replace(/\/$/, '') && !path.startsWith(this.prefix))
      throw new PeerUrlError(`URL is outside the ${this.peer} base path`, 'path');
    if (this.options.refuseDotSegments && rawPath.split('/').some((s) => s === '.' || s === '..'))
      throw new PeerUrlError(
        `URL path for ${this.peer} has a \`.\` or \`..\` segment: it would be read elsewhere than it names`,
        'dot-segment',
      );
  }

  /** Why `reference` is not followed (the PeerUrlError resolve would throw), or undefined. */
  refusalOf(reference: string): PeerUrlError | undefined {
    try {
      this.resolve(reference);
      return undefined;
    } catch (error) {
      if (error instanceof PeerUrlError) return error;
      throw error;
    }
  }
}
