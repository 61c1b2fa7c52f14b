import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * HL7 senders named by universal ID alone (MSH-3/MSH-4 `^1.2.840.99.1^ISO`, IHE style) were
 * stored with sender NULL: the intake read each HD's namespace ID only, so every such RIS was
 * one sender, sharing control IDs (idempotency keys `mllp||<MSH-10>`) and placer numbers. The
 * intake now names an HD by its namespace ID, else its universal ID; this gives the messages
 * and orders stored before the same sender, read from each message's own header (MSH-3 and
 * MSH-4, component 1 else 2), so their cancels, changes and resends still find them. Rows
 * whose header names nobody stay NULL. Not undone: the old value was the defect.
 */
export class Hl7echoSenderUniversalId20261128072000 implements MigrationInterface {
  name = 'Hl7echoSenderUniversalId20261128072000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TEMPORARY TABLE hl7_sender_fix ON COMMIT DROP AS
      WITH header AS (
        SELECT id, substring(convert_from(raw, 'LATIN1') FROM 'MSH[^\\r\\n]*') AS line
          FROM inbound_messages
         WHERE sender IS NULL AND transport = 'mllp'
      ), fields AS (
        SELECT id,
               split_part(line, substr(line, 4, 1), 3) AS msh3,
               split_part(line, substr(line, 4, 1), 4) AS msh4,
               substr(line, 5, 1) AS cs
          FROM header
         WHERE line IS NOT NULL AND length(line) > 8
      ), named AS (
        SELECT id,
               concat_ws('^',
                 coalesce(nullif(split_part(msh3, cs, 1), ''), nullif(split_part(msh3, cs, 2), '')),
                 coalesce(nullif(split_part(msh4, cs, 1), ''), nullif(split_part(msh4, cs, 2), ''))
               ) AS sender
          FROM fields
      )
      SELECT id, sender FROM named WHERE sender <> ''`);
    await q.query(`
      UPDATE inbound_messages m
         SET sender = f.sender,
             idempotency_key = CASE
               WHEN m.idempotency_key LIKE 'mllp||%'
                 THEN 'mllp|' || f.sender || substr(m.idempotency_key, 6)
               ELSE m.idempotency_key END
        FROM hl7_sender_fix f
       WHERE m.id = f.id`);
    await q.query(`
      UPDATE orders o
         SET sender = f.sender
        FROM hl7_sender_fix f
       WHERE o.inbound_message_id = f.id AND o.sender IS NULL AND o.source = 'hl7v2'`);
  }

  async down(): Promise<void> {
    // nothing to undo: NULL was the defect, and the values set are what the intake writes now
  }
}
