import type { DataSource } from 'typeorm';
import { writeAuditEvents } from '../../persistence/audit-event.repository';
import type { InboundMessageRepository } from '../../persistence/inbound-message.repository';
import type { RejectionInput } from '../intake.model';
import { storableInput, storedEnvelope } from './stored-envelope';

/** A message refused by its front door (or by the intake's answer), stored and audited. */
export class RecordRejectedUseCase {
  constructor(
    private readonly dataSource: DataSource,
    private readonly messages: InboundMessageRepository,
  ) {}

  /** Stores a refused message (raw bytes, the answer, why) and audits it. Returns its id. */
  async recordRejected(unsafeInput: RejectionInput): Promise<string> {
    const input = storableInput(unsafeInput);
    return this.dataSource.transaction(async (manager) => {
      const id = await this.messages.insertRejected(
        {
          ...storedEnvelope(input, input.response),
          error: JSON.stringify({ problems: input.problems, ...(input.response.error ?? {}) }),
        },
        manager,
      );
      await writeAuditEvents(manager, [
        {
          kind: 'inbound.rejected',
          inboundMessageId: id,
          severity: 'error',
          actor: input.sender,
          summary: `${input.messageType ?? input.transport} refused with ${input.response.code}: ${input.problems
            .map((p) => p.message)
            .slice(0, 3)
            .join('; ')}`,
          detail: {
            problems: input.problems,
            responseCode: input.response.code,
            bytes: input.raw.length,
          },
        },
      ]);
      return id;
    });
  }
}
