-- The runs page (issue 26) lists every run a session made as well as the
-- loop's, newest first: no index walked those in that order, so each page
-- sorted all of them. This one is the page's order (created_at DESC, id),
-- so a page reads its runs off the index and stops at its limit.
CREATE INDEX runs_by_creation ON runs (created_at DESC, id);

-- A pool entry records the user it was made for: where the engine mounts
-- each user's project cache (docker), only that user's creates claim it,
-- and the upkeep of another user must know whose it is rather than take it
-- for an entry of other settings (docs/project-machines.md, "Whose pool").
-- '' where the engine mounts no cache, and for an entry made before this
-- migration (the upkeep retires those on the docker engine: they may mount
-- the cache every user shared).
ALTER TABLE pool_entries ADD COLUMN user TEXT NOT NULL DEFAULT '';

-- Whose pools to fill: the users who made sessions of a project lately.
CREATE INDEX sessions_by_project ON sessions (project, created_at) WHERE project != '';
