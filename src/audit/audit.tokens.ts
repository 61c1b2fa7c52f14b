/** Injection tokens of the audit module. */
export const AUDIT_QUERY = Symbol('AUDIT_QUERY');
export const AUDIT_RETENTION = Symbol('AUDIT_RETENTION');
export const AUDIT_SESSIONS = Symbol('AUDIT_SESSIONS');
export const MESSAGE_REPROCESSOR = Symbol('MESSAGE_REPROCESSOR');

/** The bulk replay of dead letters (dead-letter-bulk-replay.ts). */
export const DEAD_LETTER_BULK_REPLAY = Symbol('DEAD_LETTER_BULK_REPLAY');
