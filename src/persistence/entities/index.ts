import { AuditEventEntity } from './audit-event.entity';
import { InboundMessageEntity } from './inbound-message.entity';
import { OrderEntity } from './order.entity';
import { OutboxEntryEntity } from './outbox-entry.entity';

export { AuditEventEntity, InboundMessageEntity, OrderEntity, OutboxEntryEntity };

export const ENTITIES = [InboundMessageEntity, OrderEntity, AuditEventEntity, OutboxEntryEntity];
