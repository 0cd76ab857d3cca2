-- Agents' private keys, sealed: each keys service (`ftwbridge keys` with
-- `kek`) keeps an agent's X25519 private key here encrypted under the key-encryption key only
-- keys services hold (pynacl SecretBox over the private key and the home's name), so any of
-- them can open any agent's session. Bridge instances never read this table. `listed`: a
-- roster of the home has listed the agent (a key never listed is a consent in progress).
CREATE TABLE agent_keys (
    public_key BYTEA PRIMARY KEY,
    home TEXT NOT NULL,
    sealed BYTEA NOT NULL,
    listed BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX agent_keys_home ON agent_keys (home);
