-- Warm pools (issue 16): sandboxes made ahead of time for a project machine,
-- claimed by `sandbox create --project`.
--
-- A pool entry is a session that does not exist yet: its future session and
-- run IDs are allocated when it is made, because the docker labels
-- (xmode.session, xmode.run) of its container cannot change later. The
-- claim moves it into sessions in one transaction (same IDs), so the reaper
-- sees it as active all along: its container is no orphan, its run's
-- worktree is no orphan. A table of its own, not a session status: entries
-- are nobody's, hold no quota and never show in `sandbox list`.
--
-- state: provisioning (owner is making it), ready (claimable), retiring
-- (owner is tearing it down). owner names the process (internal/proc plus a
-- tag) and owner_at when it took the entry, so an entry whose maker or
-- retirer died is taken over. shape is a hash of every setting that shapes
-- the sandbox (engine, mount mode, image, limits, network, endpoint…): a
-- create claims only an entry of its own shape. files is the number of
-- files at base_commit: what a fresh worktree would check out.
CREATE TABLE pool_entries (
    session_id   TEXT PRIMARY KEY,
    run_id       TEXT NOT NULL UNIQUE REFERENCES runs(id),
    project      TEXT NOT NULL,
    base_commit  TEXT NOT NULL DEFAULT '',
    files        INTEGER NOT NULL DEFAULT 0,
    engine       TEXT NOT NULL,
    shape        TEXT NOT NULL,
    mount_mode   TEXT NOT NULL DEFAULT '',
    image        TEXT NOT NULL DEFAULT '',
    container_id TEXT NOT NULL DEFAULT '',
    volumes      TEXT NOT NULL DEFAULT '[]',
    state        TEXT NOT NULL CHECK (state IN ('provisioning', 'ready', 'retiring')),
    owner        TEXT NOT NULL DEFAULT '',
    owner_at     INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    ready_at     INTEGER
);
CREATE INDEX pool_by_project ON pool_entries (project, state, shape);

-- The pool size `machine warm P --pool N` set for a machine; NULL follows
-- XMODE_POOL_SIZE.
ALTER TABLE project_machines ADD COLUMN pool_size INTEGER;
