-- Placeholder: 0011 belongs to another change being made in parallel
-- (issue 21). It is empty here so that 0012 can be applied in this branch;
-- the merge keeps the other change's 0011 instead of this file.
SELECT 1;
