/**
 * The first percent-escape of a request path that is no percent-encoded UTF-8 (RFC 3986 §2.1,
 * RFC 3629): a `%` without two hex digits after it, or a run of escapes whose bytes are no
 * UTF-8 (`%ff`, `%c3%28`, an overlong `%c0%af`). Undefined when the path decodes. The answer
 * holds only `%` and hex digits (at most 24 characters), so it can be quoted back as it is.
 * Linear in the path (Node bounds the request line at 16 KiB).
 */
export function badPathEscape(path: string): string | undefined {
  const bare = /%(?![0-9A-Fa-f]{2})/.exec(path);
  let first = bare ? { at: bare.index, text: '%' } : undefined;
  for (const run of path.matchAll(/(?:%[0-9A-Fa-f]{2})+/g)) {
    if (first && run.index > first.at) break;
    try {
      decodeURIComponent(run[0]);
    } catch {
      first = { at: run.index, text: run[0].length > 24 ? `${run[0].slice(0, 24)}…` : run[0] };
      break;
    }
  }
  return first?.text;
}
