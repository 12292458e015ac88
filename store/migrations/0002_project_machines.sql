-- Project machines (Phase C): one warm checkout per project under
-- <root>/project_machines/<project>/repo. runs.machine names the machine a
-- run's worktree was branched from ('' for a clone per run), so `machine rm`
-- can tell which open sessions still use a machine.
CREATE TABLE project_machines (
    project       TEXT PRIMARY KEY,
    repo          TEXT NOT NULL,
    default_ref   TEXT NOT NULL,
    head_commit   TEXT NOT NULL DEFAULT '',
    volume        TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    last_fetch_at INTEGER NOT NULL
);

ALTER TABLE runs ADD COLUMN machine TEXT NOT NULL DEFAULT '';
CREATE INDEX runs_by_machine ON runs (machine) WHERE machine != '';
