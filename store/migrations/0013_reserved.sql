-- Reserved for another branch's migration (issue 28's front ends were given
-- 0016); this placeholder keeps the versions without a gap until that one
-- lands. Drop it at the merge.
SELECT 1;
