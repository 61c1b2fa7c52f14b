import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

export type AuditSeverity = 'info' | 'warning' | 'error';

/** One step of an order's or a message's path; written in the same transaction as the step. */
@Entity({ name: 'audit_events' })
export class AuditEventEntity {
  @PrimaryGeneratedColumn('identity', { type: 'bigint', generatedIdentity: 'ALWAYS' })
  id!: string;

  @Column({ name: 'occurred_at', type: 'timestamptz', default: () => 'now()' })
  occurredAt!: Date;

  @Column({ name: 'order_id', type: 'uuid', nullable: true })
  orderId!: string | null;

  @Column({ name: 'inbound_message_id', type: 'uuid', nullable: true })
  inboundMessageId!: string | null;

  @Column({ type: 'text' })
  kind!: string;

  @Column({ type: 'text', default: 'info' })
  severity!: AuditSeverity;

  @Column({ type: 'text', nullable: true })
  actor!: string | null;

  @Column({ type: 'text' })
  summary!: string;

  @Column({ type: 'jsonb', default: () => `'{}'::jsonb` })
  detail!: Record<string, unknown>;
}
