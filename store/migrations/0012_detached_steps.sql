-- A background step (`sandbox exec --detach`, issue 21): run by a
-- supervisor xmode of its own, not by a terminal's. `sandbox stop` ends it
-- without --force (it is nobody's foreground step) and it does not keep an
-- expired session alive (the session's TTL bounds it).
ALTER TABLE steps ADD COLUMN detached INTEGER NOT NULL DEFAULT 0;
