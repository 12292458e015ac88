-- Reserved for issue 26's host environment policy (branch i26-engine owns
-- migration 0013). This placeholder only keeps the versions without a gap
-- until that branch lands; its own 0013 replaces this file at the merge.
SELECT 1;
