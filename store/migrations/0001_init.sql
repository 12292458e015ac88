-- Sessions, runs and steps. Times are Unix milliseconds (UTC). Later
-- migrations add messages, cloud tasks and project machines as new tables
-- keyed by session, run or project.
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE runs (
    id           TEXT PRIMARY KEY,
    created_at   INTEGER NOT NULL,
    repo         TEXT NOT NULL DEFAULT '',
    ref          TEXT NOT NULL DEFAULT '',
    base_commit  TEXT NOT NULL DEFAULT '',
    project      TEXT NOT NULL DEFAULT '',
    -- set, in the transaction that ends its last open session, when the
    -- worktree is to be reclaimed; a run with it set takes no new sessions
    reclaimed_at INTEGER
);

CREATE TABLE sessions (
    id            TEXT PRIMARY KEY,
    run_id        TEXT NOT NULL REFERENCES runs(id),
    user          TEXT NOT NULL,
    project       TEXT NOT NULL DEFAULT '',
    runner_mode   TEXT NOT NULL,
    engine        TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('provisioning', 'open', 'destroyed', 'failed')),
    end_reason    TEXT NOT NULL DEFAULT '' CHECK (end_reason IN ('', 'stopped', 'expired', 'orphaned', 'provision_failed')),
    error         TEXT NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    ended_at      INTEGER,
    worktree_path TEXT NOT NULL,
    repo          TEXT NOT NULL DEFAULT '',
    ref           TEXT NOT NULL DEFAULT '',
    base_commit   TEXT NOT NULL DEFAULT '',
    container_id  TEXT NOT NULL DEFAULT '',
    mount_mode    TEXT NOT NULL DEFAULT '',
    image         TEXT NOT NULL DEFAULT '',
    volumes       TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX sessions_by_status ON sessions (status, expires_at);
CREATE INDEX sessions_by_run ON sessions (run_id, status);
CREATE INDEX sessions_by_user ON sessions (user, status, expires_at);

CREATE TABLE steps (
    run_id       TEXT NOT NULL REFERENCES runs(id),
    seq          INTEGER NOT NULL,
    session_id   TEXT NOT NULL REFERENCES sessions(id),
    name         TEXT NOT NULL,
    argv         TEXT NOT NULL,
    dir          TEXT NOT NULL,
    state        TEXT NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'finished')),
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    finished_at  INTEGER,
    exit_code    INTEGER,
    signal       TEXT NOT NULL DEFAULT '',
    timed_out    INTEGER NOT NULL DEFAULT 0,
    oom_killed   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, seq)
);
CREATE INDEX steps_by_session ON steps (session_id, state);
