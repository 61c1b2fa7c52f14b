import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';
import type { OrderRequest, OrderSource } from '../../domain/order-request';

/** Our order: one per inbound ORC/OBR group or ServiceRequest, followed to a terminal state. */
@Entity({ name: 'orders' })
export class OrderEntity {
  @PrimaryGeneratedColumn('uuid')
  id!: string;

  @Column({ name: 'created_at', type: 'timestamptz', default: () => 'now()' })
  createdAt!: Date;

  @Column({ name: 'updated_at', type: 'timestamptz', default: () => 'now()' })
  updatedAt!: Date;

  @Column({ type: 'integer', default: 1 })
  version!: number;

  @Column({ type: 'text' })
  source!: OrderSource;

  @Column({ type: 'text', nullable: true })
  sender!: string | null;

  @Column({ name: 'inbound_message_id', type: 'uuid', nullable: true })
  inboundMessageId!: string | null;

  @Column({ type: 'text' })
  state!: string;

  @Column({ name: 'upstream_order_id', type: 'text', nullable: true })
  upstreamOrderId!: string | null;

  @Column({ name: 'upstream_status', type: 'text', nullable: true })
  upstreamStatus!: string | null;

  @Column({ name: 'upstream_batch_id', type: 'text', nullable: true })
  upstreamBatchId!: string | null;

  @Column({ name: 'accession_number', type: 'text', nullable: true })
  accessionNumber!: string | null;

  @Column({ name: 'patient_id', type: 'text', nullable: true })
  patientId!: string | null;

  @Column({ name: 'placer_order_number', type: 'text', nullable: true })
  placerOrderNumber!: string | null;

  @Column({ name: 'filler_order_number', type: 'text', nullable: true })
  fillerOrderNumber!: string | null;

  @Column({ name: 'placer_group_number', type: 'text', nullable: true })
  placerGroupNumber!: string | null;

  @Column({ name: 'study_instance_uid', type: 'text', nullable: true })
  studyInstanceUid!: string | null;

  @Column({ type: 'jsonb' })
  request!: OrderRequest;

  @Column({ name: 'mapping_version', type: 'text', nullable: true })
  mappingVersion!: string | null;

  @Column({ name: 'last_error', type: 'text', nullable: true })
  lastError!: string | null;

  @Column({ name: 'cancel_requested_at', type: 'timestamptz', nullable: true })
  cancelRequestedAt!: Date | null;

  @Column({ name: 'cancel_reason', type: 'text', nullable: true })
  cancelReason!: string | null;
}
