-- Placeholder on branch i19-newcomer only, so that its 0011 applies
-- (versions run without gaps): 0010 belongs to another branch of issue 19.
-- Delete this file when merging.
SELECT 1;
