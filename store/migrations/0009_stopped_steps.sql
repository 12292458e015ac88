-- A step ended by `sandbox stop --force` while its xmode ran (issue 19):
-- stopped_by names what stopped it ('sandbox stop'), set on the running row
-- before its processes are ended, kept when its xmode records its end, so
-- that xmode can say so and its result.json and row both show it.
ALTER TABLE steps ADD COLUMN stopped_by TEXT NOT NULL DEFAULT '';
