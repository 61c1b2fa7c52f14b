export const UPSTREAM_PROBE = Symbol('UPSTREAM_PROBE');
