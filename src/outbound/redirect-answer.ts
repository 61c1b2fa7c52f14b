/**
 * `: a redirect to <origin>, not followed …` for a 3xx answer of a peer, else nothing. Our
 * clients never follow a redirect (a credential goes to its own peer only, DESIGN.md §5), so it
 * is a dead letter: a peer moved to a new address, or a gateway sending us to its login page.
 * It read only "answered 307", and the analyst had to guess. The Location is named by its origin
 * alone (its path and query may hold a session or our identifiers), or as one on the same server.
 */
export function redirectMeaning(
  status: number,
  location: string | undefined,
  baseUrl: string,
  /** The setting naming the peer, e.g. FHIR_SERVER_URL. */
  variable: string,
): string {
  if (status < 300 || status >= 400) return '';
  const advice = `not followed (our credentials go to ${variable} only)`;
  if (!location) return `: a redirect without a Location, ${advice}`;
  let target: URL;
  try {
    target = new URL(location, baseUrl);
  } catch {
    return `: a redirect to an unreadable Location, ${advice}`;
  }
  const where =
    target.origin === new URL(baseUrl).origin
      ? 'another path of the same server'
      : target.origin === 'null'
        ? `a ${target.protocol} address`
        : target.origin;
  return `: a redirect to ${where}, ${advice}; correct ${variable}, then replay`;
}
