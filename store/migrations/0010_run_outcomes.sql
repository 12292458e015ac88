-- A run of the loop that made no change request is not in review (issue
-- 19): it ends `failed` (a required step failed and nothing changed, or its
-- agent step failed) or `no-change` (every step passed and the worktree had
-- nothing against its base). SQLite cannot alter a CHECK, so runs is
-- rebuilt as 0007 rebuilt sessions (migrations run with foreign keys off
-- and are checked before they commit). Every column, row and index of runs
-- is kept; the rebuild lists the columns of migrations 0001-0010, so a
-- migration that adds a column to runs before this one must add it here
-- too (store/migrate_test.go fails if a column is lost).
CREATE TABLE runs_new (
    id           TEXT PRIMARY KEY,
    created_at   INTEGER NOT NULL,
    repo         TEXT NOT NULL DEFAULT '',
    ref          TEXT NOT NULL DEFAULT '',
    base_commit  TEXT NOT NULL DEFAULT '',
    project      TEXT NOT NULL DEFAULT '',
    -- set, in the transaction that ends its last open session, when the
    -- worktree is to be reclaimed; a run with it set takes no new sessions
    reclaimed_at INTEGER,
    machine        TEXT NOT NULL DEFAULT '',
    machine_record TEXT NOT NULL DEFAULT '',
    objective      TEXT NOT NULL DEFAULT '',
    plan           TEXT NOT NULL DEFAULT '',
    plan_source    TEXT NOT NULL DEFAULT '',
    status         TEXT NOT NULL DEFAULT ''
        CHECK (status IN ('', 'running', 'review', 'no-change', 'failed', 'approved', 'rejected')),
    exit_code      INTEGER,
    cr_id          TEXT NOT NULL DEFAULT '',
    error          TEXT NOT NULL DEFAULT '',
    owner          TEXT NOT NULL DEFAULT '',
    finished_at    INTEGER
);
INSERT INTO runs_new (id, created_at, repo, ref, base_commit, project, reclaimed_at, machine, machine_record,
    objective, plan, plan_source, status, exit_code, cr_id, error, owner, finished_at)
SELECT id, created_at, repo, ref, base_commit, project, reclaimed_at, machine, machine_record,
    objective, plan, plan_source, status, exit_code, cr_id, error, owner, finished_at
FROM runs;
DROP TABLE runs;
ALTER TABLE runs_new RENAME TO runs;
CREATE INDEX runs_by_machine ON runs (machine) WHERE machine != '';
CREATE INDEX runs_of_the_loop ON runs (created_at) WHERE status != '';

-- Runs that older xmodes ended `review` without a change request get the
-- status they should have had.
UPDATE runs SET status = 'no-change'
    WHERE status = 'review' AND cr_id = '' AND coalesce(exit_code, 0) = 0;
UPDATE runs SET status = 'failed',
    error = 'a required step failed (exit ' || exit_code || ') and the worktree had no change to review'
    WHERE status = 'review' AND cr_id = '' AND error = '';
UPDATE runs SET status = 'failed' WHERE status = 'review' AND cr_id = '';
