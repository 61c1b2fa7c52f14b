/** The upstream's reachability and version state, as readiness and /health report it. */
export interface UpstreamHealthSnapshot {
  status: 'up' | 'down' | 'retired' | 'unknown';
  baseUrl: string;
  /** `X-API-Deprecation-Warning` last seen, e.g. "v1 will be deprecated on 2027-03-01". */
  deprecation?: string;
  migrationGuide?: string;
  detail?: string;
  checkedAt?: string;
}

/** Reachability of the upstream for readiness; the imaging client may feed richer state. */
export interface UpstreamProbe {
  check(): Promise<UpstreamHealthSnapshot>;
}
