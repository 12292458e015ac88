-- Runs of several attempts and runs that continue a change request (issue
-- 29, docs/agents.md, "Attempts" and "Continuing a run"). A run of N
-- attempts (`xmode run --attempts N`) is a run of the loop with no
-- session of its own: `attempts` is N, and each attempt is a run of the
-- loop of its own whose `parent_run` names it and whose `attempt` is its
-- number. A run made to continue a change request in a fork of its tree
-- (its sandbox had ended) names the run it continues in `parent_run`, with
-- `attempt` 0. Run statuses gain `attempting` (its attempts are at work)
-- and, as the change request's review shows through, `changes_requested`
-- and `superseded`. SQLite cannot alter a CHECK, so runs is rebuilt as
-- 0010 rebuilt it: every column, row and index kept (a migration that
-- adds a column to runs before this one must add it here too).
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
        CHECK (status IN ('', 'running', 'attempting', 'review', 'no-change', 'failed', 'approved', 'rejected',
            'changes_requested', 'superseded')),
    exit_code      INTEGER,
    cr_id          TEXT NOT NULL DEFAULT '',
    error          TEXT NOT NULL DEFAULT '',
    owner          TEXT NOT NULL DEFAULT '',
    finished_at    INTEGER,
    parent_run     TEXT NOT NULL DEFAULT '',
    attempt        INTEGER NOT NULL DEFAULT 0,
    attempts       INTEGER NOT NULL DEFAULT 0
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
CREATE INDEX runs_by_parent ON runs (parent_run) WHERE parent_run != '';
-- 0015's: the runs page's order (a rebuild drops a table's indexes).
CREATE INDEX runs_by_creation ON runs (created_at DESC, id);
