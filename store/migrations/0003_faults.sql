-- Nothing lost under faults (issue 9).
--
-- steps: a step whose xmode died is finished by the reaper or a teardown
-- as 'lost' (with lost_reason); tag is the XMODE_EXEC_TAG its processes
-- carry, how they are found to be killed; owner names the xmode process
-- that runs it (internal/proc), so a teardown can tell it is gone at once; evidence_incomplete and
-- truncated say what its evidence files lack. SQLite cannot change a
-- CHECK constraint in place, so the table is rebuilt (nothing references
-- steps).
CREATE TABLE steps_new (
    run_id              TEXT NOT NULL REFERENCES runs(id),
    seq                 INTEGER NOT NULL,
    session_id          TEXT NOT NULL REFERENCES sessions(id),
    name                TEXT NOT NULL,
    argv                TEXT NOT NULL,
    dir                 TEXT NOT NULL,
    state               TEXT NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'finished', 'lost')),
    started_at          INTEGER NOT NULL,
    heartbeat_at        INTEGER NOT NULL,
    finished_at         INTEGER,
    exit_code           INTEGER,
    signal              TEXT NOT NULL DEFAULT '',
    timed_out           INTEGER NOT NULL DEFAULT 0,
    oom_killed          INTEGER NOT NULL DEFAULT 0,
    tag                 TEXT NOT NULL DEFAULT '',
    owner               TEXT NOT NULL DEFAULT '',
    evidence_incomplete INTEGER NOT NULL DEFAULT 0,
    truncated           INTEGER NOT NULL DEFAULT 0,
    lost_reason         TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (run_id, seq)
);
INSERT INTO steps_new (run_id, seq, session_id, name, argv, dir, state, started_at, heartbeat_at,
    finished_at, exit_code, signal, timed_out, oom_killed)
SELECT run_id, seq, session_id, name, argv, dir, state, started_at, heartbeat_at,
    finished_at, exit_code, signal, timed_out, oom_killed FROM steps;
DROP TABLE steps;
ALTER TABLE steps_new RENAME TO steps;
CREATE INDEX steps_by_session ON steps (session_id, state);
CREATE INDEX steps_running ON steps (heartbeat_at) WHERE state = 'running';

-- The size of a session's worktree, measured when it was torn down
-- (sandbox show/list compute it live while the session is open).
ALTER TABLE sessions ADD COLUMN worktree_bytes INTEGER;
