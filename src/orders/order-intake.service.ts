import type { DataSource, EntityManager } from 'typeorm';
import type { IntakeResponder } from '../domain/ports/intake-responder';
import type { JobQueue } from '../jobs/job-queue';
import { InboundMessageRepository } from '../persistence/inbound-message.repository';
import { OrderRepository } from '../persistence/order.repository';
import { IntakeBatcher, type IntakeBatcherOptions } from './intake-batcher';
import type { IntakeInput, IntakeReply, RejectionInput } from './intake.model';
import { IngestOrderMessageUseCase } from './use-cases/ingest-order-message.use-case';
import { IntakePlanner } from './use-cases/intake-planner';
import { OrderChanges } from './use-cases/order-changes';
import { RecordRejectedUseCase } from './use-cases/record-rejected.use-case';

export {
  ORDER_JOBS,
  primaryPatientId,
  type IntakeInput,
  type IntakeOrder,
  type ReplacedRequest,
  type IntakeOrderResult,
  type IntakeOutcome,
  type IntakePatientEvent,
  type IntakeReply,
  type IntakeResponse,
  type RejectionInput,
} from './intake.model';
export { LINEAGE_VALUE_MAX_CHARS } from './use-cases/intake-audit';

/**
 * The one way an order enters the adapter, whatever its transport (the front doors call
 * this facade). One transaction stores the raw message, the orders, the audit trail and the
 * jobs that follow up; the caller answers the sender only after it returns (acknowledge
 * after commit). A resend (same idempotency key) is answered with the stored answer and
 * changes nothing. The use cases are in ./use-cases: ingest-order-message (the transaction),
 * intake-planner and intake-decision (what each order group does), intake-audit (the rows
 * written), order-changes (cancel, change, demographics), record-rejected.
 */
export class OrderIntakeService {
  private readonly ingestion: IngestOrderMessageUseCase;
  private readonly rejected: RecordRejectedUseCase;
  private readonly messages: InboundMessageRepository;

  constructor(dataSource: DataSource, jobs: JobQueue, options: IntakeBatcherOptions = {}) {
    const orders = new OrderRepository(dataSource);
    const messages = new InboundMessageRepository(dataSource);
    this.messages = messages;
    this.rejected = new RecordRejectedUseCase(dataSource, messages);
    this.ingestion = new IngestOrderMessageUseCase(
      dataSource,
      jobs,
      new IntakeBatcher(dataSource, options),
      messages,
      new IntakePlanner(orders),
      new OrderChanges(jobs, orders),
      this.rejected,
    );
  }

  /**
   * `responder` is the front door the message came through (the IntakeResponder port): it
   * words the answer from the outcome and may store what it serves, inside the transaction.
   */
  ingest(
    unsafeInput: IntakeInput,
    responder: IntakeResponder<EntityManager>,
  ): Promise<IntakeReply> {
    return this.ingestion.ingest(unsafeInput, responder);
  }

  /**
   * The idempotency key an accepted FHIR create of this sender with these very bytes was kept
   * under, if any: a resend is answered under it even when the original was conditional.
   */
  keyOfSameCreate(sender: string, raw: Buffer): Promise<string | undefined> {
    return this.messages.findAcceptedCreateKeyBySameBytes(sender, raw);
  }

  /** Stores a refused message (raw bytes, the answer, why) and audits it. Returns its id. */
  recordRejected(unsafeInput: RejectionInput): Promise<string> {
    return this.rejected.recordRejected(unsafeInput);
  }
}
