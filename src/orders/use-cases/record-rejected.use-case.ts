import type { DataSource } from 'typeorm';
import { writeAuditEvents, type AuditEventInput } from '../../persistence/audit-event.repository';
import type { InboundMessageRepository } from '../../persistence/inbound-message.repository';
import type { RejectionInput } from '../intake.model';
import { storableInput, storedEnvelope } from './stored-envelope';

/** A message refused by its front door (or by the intake's answer), stored and audited. */
export class RecordRejectedUseCase {
  constructor(
    private readonly dataSource: DataSource,
    private readonly messages: InboundMessageRepository,
  ) {}

  /**
   * Stores a refused message (raw bytes, the answer, why) and audits it. Returns its id.
   * `orderEvents` are the order timeline events the refusal stands for (a revoke refused as too
   * late: `order.cancel-refused`), written in the same transaction: a crash between two
   * commits left a refusal on record that the order's timeline never showed.
   */
  async recordRejected(
    unsafeInput: RejectionInput,
    orderEvents?: (inboundMessageId: string) => AuditEventInput[],
  ): Promise<string> {
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
      const more = orderEvents?.(id) ?? [];
      if (more.length > 0) await writeAuditEvents(manager, more);
      return id;
    });
  }
}
