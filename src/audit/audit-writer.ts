/**
 * PENDING (issue #16): the audit writer moved down to persistence/audit-event.repository.ts.
 * This re-export keeps src/orders/ (moved to repositories on its own branch) compiling; the
 * lead deletes it once no file imports it.
 */
export {
  type AuditEventInput,
  scrubSecrets,
  writeAuditEvents,
} from '../persistence/audit-event.repository';
