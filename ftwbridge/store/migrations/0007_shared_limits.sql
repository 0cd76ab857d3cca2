-- What the OAuth service kept in one process's memory and every instance must
-- share. Times are ms since the Unix epoch, by the bridge's wall clock.

-- A token bucket per (limit, key): `level` tokens at `at_ms`, refilled at the limit's rate up to
-- its burst (ftwbridge/store/limits.py charges it in one statement). `full_at_ms` is when the
-- bucket is full again: a full bucket is the same as no row, so rows past it are deleted.
CREATE TABLE oauth_limits (
    name TEXT NOT NULL,
    key TEXT NOT NULL,
    level DOUBLE PRECISION NOT NULL,
    at_ms BIGINT NOT NULL,
    full_at_ms BIGINT NOT NULL,
    PRIMARY KEY (name, key)
);
CREATE INDEX oauth_limits_full ON oauth_limits (full_at_ms);
CREATE INDEX oauth_limits_age ON oauth_limits (name, at_ms);

-- A refresh token's rotation, kept for the grace window (`refresh_grace_ms`): the child it gave
-- (SHA-256) and the answer sealed under a key only the parent token itself yields
-- (ftwbridge/store/rotations.py, ftwbridge/oauth/grace.py). It goes with its parent, and is
-- deleted once its window has ended or its child is used.
CREATE TABLE refresh_rotations (
    parent BYTEA PRIMARY KEY REFERENCES refresh_tokens (hash) ON DELETE CASCADE,
    child BYTEA NOT NULL,
    sealed BYTEA NOT NULL,
    until_ms BIGINT NOT NULL
);
CREATE INDEX refresh_rotations_until ON refresh_rotations (until_ms);
CREATE INDEX refresh_rotations_child ON refresh_rotations (child);
