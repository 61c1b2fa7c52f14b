import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Identifiers are held in one form, Unicode NFC (src/domain/identifier-form.ts): the intake
 * composes them from now on, and the lookups compare composed keys. An order stored before in
 * the decomposed form its sender wrote (`E` + U+0301) would no longer be found by its own
 * sender's next message (composed on intake): its identifier columns, the identifiers of its
 * request and its retired patient identifiers are composed here, as are held instances'
 * accession numbers. Only rows that hold a decomposed sequence are written. Not undone: the
 * form the sender wrote is kept in the raw message (inbound_messages.raw).
 */
export class NfcOrderIdentifiers20261128132000 implements MigrationInterface {
  name = 'NfcOrderIdentifiers20261128132000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE FUNCTION nfc_migration_value(e jsonb, key text) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
        SELECT CASE WHEN jsonb_typeof(e) = 'object' AND jsonb_typeof(e -> key) = 'string'
          THEN jsonb_set(e, ARRAY[key], to_jsonb(normalize(e ->> key, NFC))) ELSE e END $$`);
    await q.query(`
      CREATE FUNCTION nfc_migration_id(e jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
        SELECT nfc_migration_value(nfc_migration_value(e, 'value'), 'system') $$`);
    await q.query(`
      CREATE FUNCTION nfc_migration_ids(a jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
        SELECT CASE WHEN jsonb_typeof(a) = 'array' AND jsonb_array_length(a) > 0
          THEN (SELECT jsonb_agg(nfc_migration_id(e) ORDER BY i)
                  FROM jsonb_array_elements(a) WITH ORDINALITY AS t(e, i))
          ELSE a END $$`);
    await q.query(`
      CREATE FUNCTION nfc_migration_set(r jsonb, key text, v jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
        SELECT CASE WHEN r ? key THEN jsonb_set(r, ARRAY[key], v) ELSE r END $$`);
    const id = (key: string) => `nfc_migration_id(request -> '${key}')`;
    const request = [
      ['placerOrderNumber', id('placerOrderNumber')],
      ['fillerOrderNumber', id('fillerOrderNumber')],
      ['placerGroupNumber', id('placerGroupNumber')],
      ['accessionNumber', `nfc_migration_value(request, 'accessionNumber') -> 'accessionNumber'`],
      [
        'accessionIssuer',
        `nfc_migration_value(nfc_migration_value(nfc_migration_value(request -> 'accessionIssuer',
           'namespace'), 'universalId'), 'universalIdType')`,
      ],
      [
        'patient',
        `CASE WHEN jsonb_typeof(request -> 'patient') = 'object'
           THEN nfc_migration_set(request -> 'patient', 'identifiers',
                                  nfc_migration_ids(request -> 'patient' -> 'identifiers'))
           ELSE request -> 'patient' END`,
      ],
    ].reduce((r, [key, value]) => `nfc_migration_set(${r}, '${key}', ${value})`, 'request');
    await q.query(`
      UPDATE orders SET
        placer_order_number = normalize(placer_order_number, NFC),
        filler_order_number = normalize(filler_order_number, NFC),
        placer_group_number = normalize(placer_group_number, NFC),
        accession_number = normalize(accession_number, NFC),
        patient_id = normalize(patient_id, NFC),
        retired_patient_identifiers = nfc_migration_ids(retired_patient_identifiers),
        request = ${request}
      WHERE NOT (request::text IS NFC NORMALIZED AND retired_patient_identifiers::text IS NFC NORMALIZED
                 AND coalesce(placer_order_number, '') || coalesce(filler_order_number, '')
                     || coalesce(placer_group_number, '') || coalesce(accession_number, '')
                     || coalesce(patient_id, '') IS NFC NORMALIZED)`);
    await q.query(`
      UPDATE study_instances SET accession_number = normalize(accession_number, NFC)
       WHERE accession_number IS NOT NULL AND accession_number IS NOT NFC NORMALIZED`);
    for (const f of ['set(jsonb, text, jsonb)', 'ids(jsonb)', 'id(jsonb)', 'value(jsonb, text)'])
      await q.query(`DROP FUNCTION nfc_migration_${f}`);
  }

  async down(): Promise<void> {
    // the composed form is the same text; the sender's form is in the raw message
  }
}
