-- Events every instance must hear, on the one channel `ftwbridge`. Triggers
-- send them, so each NOTIFY is part of the transaction that made the change (sent at its
-- commit, never for a change rolled back) whoever made it: an instance, the command line, or
-- an operator's own SQL. The payload is a JSON object with `kind` and the home; PostgreSQL
-- delivers identical payloads of one transaction once (one `revoke` for all of an agent's
-- tokens). Lease renewals change no watched table: no NOTIFY on keepalives.

CREATE FUNCTION ftwbridge_notify_roster() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ftwbridge', json_build_object(
        'kind', 'roster', 'home', NEW.home, 'seq', NEW.seq)::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER rosters_notify AFTER INSERT OR UPDATE ON rosters
    FOR EACH ROW EXECUTE FUNCTION ftwbridge_notify_roster();

CREATE FUNCTION ftwbridge_notify_enroll() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ftwbridge', json_build_object(
        'kind', 'enroll', 'home', COALESCE(NEW.home, OLD.home))::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER homes_notify AFTER INSERT OR UPDATE OR DELETE ON homes
    FOR EACH ROW EXECUTE FUNCTION ftwbridge_notify_enroll();

CREATE FUNCTION ftwbridge_notify_revoke() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ftwbridge', json_build_object(
        'kind', 'revoke', 'home', OLD.home, 'agentKey', encode(OLD.agent_key, 'hex'))::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER tokens_notify_drop AFTER DELETE ON tokens
    FOR EACH ROW EXECUTE FUNCTION ftwbridge_notify_revoke();
CREATE TRIGGER tokens_notify_withdraw AFTER UPDATE OF withdrawn ON tokens
    FOR EACH ROW WHEN (NEW.withdrawn AND NOT OLD.withdrawn)
    EXECUTE FUNCTION ftwbridge_notify_revoke();

CREATE FUNCTION ftwbridge_notify_takeover() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ftwbridge', json_build_object(
        'kind', 'takeover', 'home', NEW.home, 'epoch', NEW.epoch,
        'instance', NEW.instance_id)::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER uplinks_notify AFTER INSERT OR UPDATE OF instance_id, epoch ON uplinks
    FOR EACH ROW WHEN (NEW.instance_id IS NOT NULL)
    EXECUTE FUNCTION ftwbridge_notify_takeover();
