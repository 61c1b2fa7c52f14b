import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

export type InboundTransport = 'mllp' | 'fhir-rest' | 'fhir-subscription' | 'dicomweb' | 'api';
export type InboundOutcome = 'accepted' | 'rejected' | 'error' | 'duplicate';

/** Every inbound message, byte for byte, accepted or not (audit log source of truth). */
@Entity({ name: 'inbound_messages' })
export class InboundMessageEntity {
  @PrimaryGeneratedColumn('uuid')
  id!: string;

  @Column({ name: 'received_at', type: 'timestamptz', default: () => 'now()' })
  receivedAt!: Date;

  @Column({ type: 'text' })
  transport!: InboundTransport;

  @Column({ type: 'text', nullable: true })
  sender!: string | null;

  @Column({ name: 'remote_address', type: 'text', nullable: true })
  remoteAddress!: string | null;

  @Column({ name: 'message_type', type: 'text', nullable: true })
  messageType!: string | null;

  @Column({ name: 'message_control_id', type: 'text', nullable: true })
  messageControlId!: string | null;

  @Column({ name: 'idempotency_key', type: 'text', nullable: true })
  idempotencyKey!: string | null;

  @Column({ name: 'content_type', type: 'text', nullable: true })
  contentType!: string | null;

  @Column({ type: 'bytea' })
  raw!: Buffer;

  @Column({ type: 'text' })
  outcome!: InboundOutcome;

  @Column({ name: 'response_code', type: 'text', nullable: true })
  responseCode!: string | null;

  @Column({ type: 'bytea', nullable: true })
  response!: Buffer | null;

  @Column({ name: 'response_content_type', type: 'text', nullable: true })
  responseContentType!: string | null;

  @Column({ type: 'jsonb', nullable: true })
  error!: Record<string, unknown> | null;

  @Column({ type: 'jsonb', default: () => `'[]'::jsonb` })
  quirks!: Array<{ code: string; detail: string }>;
}
