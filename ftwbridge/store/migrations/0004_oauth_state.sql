-- Sign-in state that must survive a restart of any instance:
-- pending consents, authorization codes and claim offers, expired on load.
CREATE TABLE oauth_state (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    record JSONB NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    PRIMARY KEY (kind, key)
);
