import type { Request } from 'express';

interface RouteLayer {
  route?: { path: string; methods: Record<string, boolean> };
  match(path: string): boolean;
}

/**
 * The methods our routes answer on the request's path (RFC 9110 §10.2.1 Allow), read from the
 * application's router: empty when no route serves the path at all (a 404). HEAD goes with
 * GET (Express answers it through the GET route). Catch-all routes (a `*` wildcard, as the FHIR
 * fallback has) say nothing about a path and are left out.
 */
export function allowedMethods(req: Request): string[] {
  const stack = (req.app as unknown as { router?: { stack?: RouteLayer[] } }).router?.stack ?? [];
  const methods = new Set<string>();
  for (const layer of stack) {
    if (!layer.route || layer.route.path.includes('*')) continue;
    // Layer.match is synchronous; the router reads what it sets only within its own call.
    if (!layer.match(req.path)) continue;
    for (const [method, on] of Object.entries(layer.route.methods))
      if (on && method !== '_all') methods.add(method.toUpperCase());
  }
  if (methods.has('GET')) methods.add('HEAD');
  const order = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'];
  return [...methods].sort(
    (a, b) => (order.indexOf(a) + 1 || 99) - (order.indexOf(b) + 1 || 99) || a.localeCompare(b),
  );
}
