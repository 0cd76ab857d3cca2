-- The directory: which instance holds which home's uplink.
-- `instances`: one row per instance id, kept across its restarts. `lock_id` is the second key
-- of the session advisory lock its presence connection holds while it runs: a lookup counts
-- an instance only while that lock is held (it goes with the connection, at once, when the
-- process dies) and its lease (`lease_until_ms`, ms since the epoch, renewed every few
-- seconds by one UPDATE) has not run out.
CREATE TABLE instances (
    instance_id TEXT PRIMARY KEY,
    lock_id SERIAL UNIQUE,
    url TEXT NOT NULL,
    lease_until_ms BIGINT NOT NULL
);

-- `uplinks`: a home's holder and epoch. The row stays when the uplink ends (holder NULL), so
-- a home's epoch only ever grows: every claim of its uplink takes the next one.
CREATE TABLE uplinks (
    home TEXT PRIMARY KEY,
    instance_id TEXT REFERENCES instances (instance_id),
    epoch BIGINT NOT NULL
);
CREATE INDEX uplinks_instance ON uplinks (instance_id);
