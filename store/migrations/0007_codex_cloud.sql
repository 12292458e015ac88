-- The Codex cloud loop (docs/codex-cloud.md). A cloud_subscription session
-- moves open -> submitted -> ready | failed, so the status and end-reason
-- CHECKs of sessions widen. SQLite cannot alter a CHECK: the table is rebuilt
-- (xmode applies migrations with foreign_keys off and checks them before
-- committing). Every column, row and index of sessions is kept; the rebuild
-- lists the columns of migrations 0001-0006, so a migration that adds a column
-- to sessions before this one must add it here too (store/migrate_test.go
-- fails if a column is lost).
CREATE TABLE sessions_new (
    id            TEXT PRIMARY KEY,
    run_id        TEXT NOT NULL REFERENCES runs(id),
    user          TEXT NOT NULL,
    project       TEXT NOT NULL DEFAULT '',
    runner_mode   TEXT NOT NULL,
    engine        TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('provisioning', 'open', 'submitted', 'ready', 'destroyed', 'failed')),
    end_reason    TEXT NOT NULL DEFAULT '' CHECK (end_reason IN ('', 'stopped', 'expired', 'orphaned', 'provision_failed',
                                                                 'task_ready', 'task_failed', 'submit_failed')),
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
    volumes       TEXT NOT NULL DEFAULT '[]',
    worktree_bytes INTEGER,
    network       TEXT NOT NULL DEFAULT ''
);
INSERT INTO sessions_new (id, run_id, user, project, runner_mode, engine, status, end_reason, error,
    created_at, expires_at, ended_at, worktree_path, repo, ref, base_commit, container_id, mount_mode, image, volumes,
    worktree_bytes, network)
SELECT id, run_id, user, project, runner_mode, engine, status, end_reason, error,
    created_at, expires_at, ended_at, worktree_path, repo, ref, base_commit, container_id, mount_mode, image, volumes,
    worktree_bytes, network
FROM sessions;
DROP TABLE sessions;
ALTER TABLE sessions_new RENAME TO sessions;
CREATE INDEX sessions_by_status ON sessions (status, expires_at);
CREATE INDEX sessions_by_run ON sessions (run_id, status);
CREATE INDEX sessions_by_user ON sessions (user, status, expires_at);

-- One task per submitted session. state mirrors what the cloud last said;
-- finished_at marks the loop done with it (the session ended ready or
-- failed, or was stopped: 'abandoned'). An unfinished task is due when
-- next_due_at <= now; a NULL next_due_at parks it after a permanent error
-- until a person acts and `cloud poll --sweep` re-queues it. The poller's
-- lease is a claim in meta ('cloud:<task_id>'), as the reaper's are.
CREATE TABLE cloud_tasks (
    task_id        TEXT PRIMARY KEY,
    session_id     TEXT NOT NULL UNIQUE REFERENCES sessions(id),
    url            TEXT NOT NULL DEFAULT '',
    env_id         TEXT NOT NULL,
    branch         TEXT NOT NULL DEFAULT '',
    attempts       INTEGER NOT NULL DEFAULT 1,
    state          TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'ready', 'failed', 'abandoned')),
    title          TEXT NOT NULL DEFAULT '',
    summary        TEXT NOT NULL DEFAULT '',
    submitted_at   INTEGER NOT NULL,
    last_poll_at   INTEGER,
    next_due_at    INTEGER,
    polls          INTEGER NOT NULL DEFAULT 0,
    failures       INTEGER NOT NULL DEFAULT 0,
    last_error     TEXT NOT NULL DEFAULT '',
    error_class    TEXT NOT NULL DEFAULT '' CHECK (error_class IN ('', 'transient', 'permanent')),
    transcript_len INTEGER NOT NULL DEFAULT 0,
    capture        TEXT NOT NULL DEFAULT '',
    finished_at    INTEGER
);
CREATE INDEX cloud_tasks_due ON cloud_tasks (next_due_at, task_id) WHERE finished_at IS NULL;

-- The session's thread: the task's transcript as it arrived. A line is keyed
-- by its index in the transcript and inserted in the transaction that moves
-- transcript_len, so a poll repeated after a crash adds nothing twice.
CREATE TABLE cloud_transcript (
    task_id    TEXT NOT NULL REFERENCES cloud_tasks(task_id),
    idx        INTEGER NOT NULL,
    line       TEXT NOT NULL,
    arrived_at INTEGER NOT NULL,
    PRIMARY KEY (task_id, idx)
) WITHOUT ROWID;
