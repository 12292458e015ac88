-- Reserved for another branch's migration (issue 29's loop was given 0017
-- and 0018); this placeholder lets them apply in order until that one
-- lands. Drop it at the merge.
SELECT 1;
