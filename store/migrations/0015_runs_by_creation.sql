-- The runs page (issue 26) lists every run a session made as well as the
-- loop's, newest first: no index walked those in that order, so each page
-- sorted all of them. This one is the page's order (created_at DESC, id),
-- so a page reads its runs off the index and stops at its limit.
CREATE INDEX runs_by_creation ON runs (created_at DESC, id);
