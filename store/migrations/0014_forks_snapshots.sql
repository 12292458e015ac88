-- Forks and snapshots (issue 29): a session made by `sandbox fork` records
-- the session it was forked from and the last step that session's run had
-- begun then; one made by `sandbox create --from-snapshot` records the
-- snapshot. A snapshot keeps a session's worktree (its verified tree and
-- commits, in a store of its own under <root>/snapshots/<id>/) and, on an
-- engine that has one, the sandbox's filesystem outside the worktree (a
-- committed image), until it expires and the reaper removes it. The row is
-- written before anything is made (status `making`), so a snapshot that
-- died half-made is found and removed.
ALTER TABLE sessions ADD COLUMN forked_from TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN forked_at_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN from_snapshot TEXT NOT NULL DEFAULT '';

CREATE TABLE snapshots (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    user TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('making', 'ready')),
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL DEFAULT 0,
    repo TEXT NOT NULL,
    ref TEXT NOT NULL DEFAULT '',
    project TEXT NOT NULL DEFAULT '',
    machine TEXT NOT NULL DEFAULT '',
    base_commit TEXT NOT NULL,
    head TEXT NOT NULL DEFAULT '',
    tree TEXT NOT NULL DEFAULT '',
    commit_id TEXT NOT NULL DEFAULT '',
    runner_mode TEXT NOT NULL,
    engine TEXT NOT NULL,
    image TEXT NOT NULL DEFAULT '',
    network TEXT NOT NULL DEFAULT '',
    with_ignored INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL DEFAULT 0,
    warnings TEXT NOT NULL DEFAULT '[]',
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX snapshots_by_name ON snapshots (user, name);
CREATE INDEX snapshots_by_expiry ON snapshots (expires_at);
