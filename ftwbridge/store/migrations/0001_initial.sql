-- The bridge's state on PostgreSQL: the same tables as SQLite's (ftwbridge/store/sqlite.py),
-- with PostgreSQL's types. Times are ms since the Unix epoch; tokens are kept only as SHA-256.
CREATE TABLE homes (home TEXT PRIMARY KEY, public_key BYTEA NOT NULL);

CREATE TABLE rosters (home TEXT PRIMARY KEY, seq BIGINT NOT NULL, signed BYTEA NOT NULL);

CREATE TABLE tokens (
    hash BYTEA PRIMARY KEY,
    home TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    agent_key BYTEA NOT NULL,
    scopes TEXT[] NOT NULL,
    resource TEXT NOT NULL,
    client TEXT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    withdrawn BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX tokens_agent ON tokens (home, agent_key);

CREATE TABLE oauth_clients (
    client_id TEXT PRIMARY KEY,
    metadata JSONB NOT NULL,
    expires_at_ms BIGINT NOT NULL
);

CREATE TABLE refresh_tokens (
    hash BYTEA PRIMARY KEY,
    family TEXT NOT NULL,
    used BOOLEAN NOT NULL DEFAULT FALSE,
    record JSONB NOT NULL,
    expires_at_ms BIGINT NOT NULL
);
CREATE INDEX refresh_family ON refresh_tokens (family);
CREATE INDEX refresh_agent ON refresh_tokens ((record ->> 'home'), (record ->> 'agentKey'));

-- `Store.write_mark`: a counter that grows in the same transaction as any change to `homes`
-- (`ftwbridge home enroll`, or an operator's own SQL), so an instance that reads it and then
-- the keys never misses a change that committed after its read.
CREATE TABLE write_marks (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
INSERT INTO write_marks VALUES ('homes', 0);

CREATE FUNCTION homes_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE write_marks SET value = value + 1 WHERE name = 'homes';
    RETURN NULL;
END
$$;

CREATE TRIGGER homes_written AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON homes
    FOR EACH STATEMENT EXECUTE FUNCTION homes_written();
