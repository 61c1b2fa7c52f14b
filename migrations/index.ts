import { InitialSchema20261121090000 } from './20261121090000-initial-schema';

/**
 * Every migration, oldest first. A migration is never edited after it lands: add a new
 * timestamped file and list it here.
 */
export const MIGRATIONS = [InitialSchema20261121090000];
