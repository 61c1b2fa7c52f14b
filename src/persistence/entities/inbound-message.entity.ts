/**
 * PENDING (issue #16): no TypeORM entity is used (every statement is raw SQL in a
 * repository), so the entities are gone. src/orders/order-intake.service.ts, being moved to
 * repositories on its own branch, still imports this type from here; the lead deletes this
 * file (and the folder) once it imports domain/inbound-message.ts instead.
 */
export type { InboundOutcome, InboundTransport } from '../../domain/inbound-message';
