-- Where a session was made (issue 21): `cli` for the command line (and the
-- loop, the pools and the cloud, all of which it drives), `mcp` for a
-- session an MCP client made through `xmode mcp`, with that client's name
-- and version as it gave them in its initialize request (origin_client) and
-- the title it gave the sandbox. An MCP server acts, by default, only on
-- the sessions of its user whose origin is `mcp` (docs/mcp.md, "Security
-- model"), so that a restarted server picks up where the last one left off.
ALTER TABLE sessions ADD COLUMN origin TEXT NOT NULL DEFAULT 'cli'
    CHECK (origin IN ('cli', 'mcp'));
ALTER TABLE sessions ADD COLUMN origin_client TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN title TEXT NOT NULL DEFAULT '';
CREATE INDEX sessions_by_origin ON sessions (user, origin);
