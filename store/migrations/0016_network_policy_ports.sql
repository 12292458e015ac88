-- Sandbox networks (issue 28, docs/network.md).
--
-- sessions.network_policy: the egress policy of a session whose network is
-- proxied (--network allow or open), as JSON (docs/reference.md, "Network
-- policy"): its mode, each rule with the source it came from, the
-- credentials (where the secret is, never the secret) with the placeholder
-- the sandbox got, the names the proxy resolves itself. NULL: the session's
-- network is not xmode's to decide (none, a docker network, the host's). A
-- change on a live sandbox rewrites it, compared and swapped, in the
-- transaction that ends its recorded step.
ALTER TABLE sessions ADD COLUMN network_policy TEXT;

-- ports: a sandbox port published on the host (`sandbox port`,
-- docs/network.md "Ports"): where it listens on the host, the forwarder
-- process that serves it (owner, internal/proc: `sandbox stop` and the
-- reaper end it), and when it was closed. A port is published at most once
-- per session at a time.
CREATE TABLE ports (
    session_id TEXT NOT NULL REFERENCES sessions (id),
    port       INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
    host_addr  TEXT NOT NULL,
    owner      TEXT NOT NULL DEFAULT '',
    opened_at  INTEGER NOT NULL,
    closed_at  INTEGER,
    error      TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX ports_open ON ports (session_id, port) WHERE closed_at IS NULL;
CREATE INDEX ports_of_session ON ports (session_id);
