import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Upstream client state shared by adapter replicas: the client-side rate limit counters,
 * the progress of multipart uploads (for resume after a restart) and the leases that bound
 * concurrent uploads per organization. See docs/imaging-client.md.
 */
export class ImagingClient20261121100000 implements MigrationInterface {
  name = 'ImagingClient20261121100000';

  async up(q: QueryRunner): Promise<void> {
    // Sliding window made of 1-second buckets per key ("<scope>|total", "<scope>|/status"…).
    await q.query(`
      CREATE TABLE imaging_rate_limit_buckets (
        key text NOT NULL,
        bucket_start_ms bigint NOT NULL,
        count integer NOT NULL,
        PRIMARY KEY (key, bucket_start_ms)
      )`);
    // One round trip per call: lock the keys (sorted, so two callers never deadlock), sum the
    // buckets that overlap the last window, and count the call in every key or in none.
    // Returns 0 when the call may go, else the milliseconds until it might.
    await q.query(`
      CREATE FUNCTION imaging_rate_limit_acquire(p_keys text[], p_limits integer[], p_window_ms integer, p_bucket_ms integer)
      RETURNS bigint LANGUAGE plpgsql AS $$
      DECLARE
        now_ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000);
        cur bigint := now_ms - (now_ms % p_bucket_ms);
        since bigint := cur - p_window_ms;
        used bigint;
        oldest bigint;
        wait_ms bigint := 0;
        i integer;
      BEGIN
        PERFORM pg_advisory_xact_lock(hashtextextended('imaging_rate_limit|' || k, 0))
          FROM (SELECT unnest(p_keys) AS k ORDER BY 1) AS keys;
        DELETE FROM imaging_rate_limit_buckets WHERE key = ANY (p_keys) AND bucket_start_ms < since;
        FOR i IN 1 .. array_length(p_keys, 1) LOOP
          SELECT coalesce(sum(count), 0), min(bucket_start_ms) INTO used, oldest
            FROM imaging_rate_limit_buckets WHERE key = p_keys[i] AND bucket_start_ms >= since;
          IF used >= p_limits[i] THEN
            wait_ms := greatest(wait_ms, oldest + p_window_ms + p_bucket_ms - now_ms, 1);
          END IF;
        END LOOP;
        IF wait_ms > 0 THEN
          RETURN wait_ms;
        END IF;
        INSERT INTO imaging_rate_limit_buckets (key, bucket_start_ms, count)
          SELECT k, cur, 1 FROM unnest(p_keys) AS k
          ON CONFLICT (key, bucket_start_ms) DO UPDATE SET count = imaging_rate_limit_buckets.count + 1;
        RETURN 0;
      END $$`);

    // Never the presigned URLs: they are credentials; fresh ones are requested on resume.
    await q.query(`
      CREATE TABLE imaging_upload_progress (
        order_id text PRIMARY KEY,
        upload_id text NOT NULL,
        organization_id text NOT NULL,
        size_bytes bigint NOT NULL,
        part_size_bytes bigint NOT NULL,
        part_count integer NOT NULL,
        file_fingerprint text NOT NULL,
        parts jsonb NOT NULL DEFAULT '{}'::jsonb,
        started_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now()
      )`);

    await q.query(`
      CREATE TABLE imaging_upload_slots (
        organization_id text NOT NULL,
        holder text NOT NULL,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (organization_id, holder)
      )`);
    await q.query(`
      CREATE FUNCTION imaging_upload_slot_acquire(p_org text, p_holder text, p_limit integer, p_lease_ms integer)
      RETURNS boolean LANGUAGE plpgsql AS $$
      DECLARE
        held integer;
      BEGIN
        PERFORM pg_advisory_xact_lock(hashtextextended('imaging_upload_slots|' || p_org, 0));
        -- A replica that died without releasing stops holding a slot when its lease runs out.
        DELETE FROM imaging_upload_slots WHERE organization_id = p_org AND expires_at < clock_timestamp();
        SELECT count(*) INTO held FROM imaging_upload_slots WHERE organization_id = p_org;
        IF held >= p_limit THEN
          RETURN false;
        END IF;
        INSERT INTO imaging_upload_slots (organization_id, holder, expires_at)
          VALUES (p_org, p_holder, clock_timestamp() + p_lease_ms * interval '1 millisecond');
        RETURN true;
      END $$`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(
      `DROP FUNCTION IF EXISTS imaging_upload_slot_acquire(text, text, integer, integer)`,
    );
    await q.query(`DROP TABLE IF EXISTS imaging_upload_slots`);
    await q.query(`DROP TABLE IF EXISTS imaging_upload_progress`);
    await q.query(
      `DROP FUNCTION IF EXISTS imaging_rate_limit_acquire(text[], integer[], integer, integer)`,
    );
    await q.query(`DROP TABLE IF EXISTS imaging_rate_limit_buckets`);
  }
}
