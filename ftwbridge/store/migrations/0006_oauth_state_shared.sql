-- Sign-in state shared by every instance (issue 13, the sign-in across instances): the store
-- is the truth for consent requests, codes and claim offers, and instances look items up by
-- what their record says (a home's consents that wait for its owner; a home's open claim
-- offer), with JSONB containment (`record @> '{"home": ..., "status": ...}'`), and sweep the
-- expired ones by time.
CREATE INDEX oauth_state_record ON oauth_state USING gin (record jsonb_path_ops);
CREATE INDEX oauth_state_expiry ON oauth_state (kind, expires_at_ms);
