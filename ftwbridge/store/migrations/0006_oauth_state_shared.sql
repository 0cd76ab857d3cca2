-- Sign-in state shared by every instance, so sign-in works across instances: the store
-- is the truth for consent requests, codes and claim offers, and instances look items up by
-- what their record says (a home's consents that wait for its owner; a home's open claim
-- offer), with JSONB containment (`record @> '{"home": ..., "status": ...}'`), and sweep the
-- expired ones by time.
CREATE INDEX oauth_state_record ON oauth_state USING gin (record jsonb_path_ops);
CREATE INDEX oauth_state_expiry ON oauth_state (kind, expires_at_ms);

-- A home's claim offer written (by the instance that holds its uplink): event `claim`, so
-- whoever waits for it (the cluster's scripted person, `make cluster`) looks again, with no
-- polling. Instances hear it and ignore it.
CREATE FUNCTION ftwbridge_notify_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ftwbridge', json_build_object(
        'kind', 'claim', 'home', NEW.record ->> 'home')::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER oauth_state_notify_claim AFTER INSERT OR UPDATE ON oauth_state
    FOR EACH ROW WHEN (NEW.kind = 'claim') EXECUTE FUNCTION ftwbridge_notify_claim();
