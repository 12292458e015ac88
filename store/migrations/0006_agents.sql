-- Agents, plans and the governed loop (issue 13).
--
-- sessions.network: the docker network a volume-mode session was created
-- on (sandbox create --network, else XMODE_SANDBOX_NETWORK), so an agent
-- that needs the network is refused at once on a session that has none.
ALTER TABLE sessions ADD COLUMN network TEXT NOT NULL DEFAULT '';

-- A run started by `xmode run` has an objective, the plan it ran (JSON),
-- a status, the exit status of its first failing required step, the
-- change request built from it and the xmode process running it (owner,
-- internal/proc: a run whose xmode died is shown as failed). Runs made by
-- `sandbox create` keep objective and status ''.
ALTER TABLE runs ADD COLUMN objective TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN plan TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN plan_source TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN status TEXT NOT NULL DEFAULT ''
    CHECK (status IN ('', 'running', 'review', 'failed', 'approved', 'rejected'));
ALTER TABLE runs ADD COLUMN exit_code INTEGER;
ALTER TABLE runs ADD COLUMN cr_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN error TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN finished_at INTEGER;
CREATE INDEX runs_of_the_loop ON runs (created_at) WHERE status != '';
