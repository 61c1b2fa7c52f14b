import type { Resource } from '@medplum/fhirtypes';
import { sha256Hex } from '../common/hash';

/** Which of two versions of one EHR resource is newer, as far as their version tags tell. */

/** The version a request read from the EHR is known by: versionId, else lastUpdated, else its hash. */
export function versionTag(sr: Resource): string {
  return sr.meta?.versionId ?? sr.meta?.lastUpdated ?? `sha256:${sha256Hex(JSON.stringify(sr))}`;
}

/** An R4 instant (meta.lastUpdated), the version tag of a request without a versionId. */
const INSTANT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;

/**
 * True when `incoming` is known to be an earlier version than `kept`: both numeric version
 * ids (HAPI FHIR, Oracle Health), or both last-updated instants (a server without versionId).
 */
export function isOlderVersion(incoming: string, kept: string | null): boolean {
  if (kept === null) return false;
  if (/^\d{1,15}$/.test(incoming) && /^\d{1,15}$/.test(kept))
    return Number(incoming) < Number(kept);
  if (INSTANT.test(incoming) && INSTANT.test(kept)) return Date.parse(incoming) < Date.parse(kept);
  return false;
}

/**
 * The newest of the entries one focus names: a later entry replaces an earlier one unless its
 * version is known to be older (numeric version ids or last-updated instants, as the intake
 * compares them); versions that cannot be ordered keep Bundle order, the order of the events.
 */
export function newestVersion<T extends { resource: Resource }>(entries: T[]): T | undefined {
  let newest: T | undefined;
  for (const e of entries) {
    if (!newest || !isOlderVersion(versionTag(e.resource), versionTag(newest.resource))) newest = e;
  }
  return newest;
}
