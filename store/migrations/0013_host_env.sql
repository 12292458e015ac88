-- The environment policy of a host session's steps (issue 26): what they
-- inherit of the environment of the xmode that runs them — `all`, `core`
-- or `none`, then include= and exclude= patterns (internal/hostenv) — as
-- it was configured when the session was made. '' for a session whose
-- steps do not run on the host (docker, the cloud), and for a host
-- session made before it was recorded: those inherit everything, as then.
ALTER TABLE sessions ADD COLUMN host_env TEXT NOT NULL DEFAULT '';
