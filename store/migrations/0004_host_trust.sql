-- Nothing runs on the host that a sandbox chose (issue 10).
--
-- The name of a project-machine worktree's record (.git/worktrees/<name>),
-- recorded when the worktree is made: teardown removes the record by this
-- name instead of following files a sandbox can rewrite (gitdir, commondir).
ALTER TABLE runs ADD COLUMN machine_record TEXT NOT NULL DEFAULT '';
