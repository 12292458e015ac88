-- Change requests in versions, reviews that ask for changes, comments on
-- the lines of a version's diff, and attempts closed as superseded (issue
-- 29, docs/change-requests.md, "Versions").
--
-- A change request keeps its identity (id, run, number, title) and gets
-- versions: each one a package of its own under runs/<run>/change_requests/
-- <number>/ of the run that made it (the change request's own run, or a
-- run that continues it in a fork of its tree). change_requests keeps, for
-- the newest version, what it kept for the one package (tree, manifest,
-- stat), beside `version`; change_request_versions keeps every version,
-- the first included. A review asking for changes was a rejection whose
-- note began "changes requested: "; it is a decision of its own now
-- (`changes_requested`: the change request awaits a new version), and so
-- is `superseded` (another attempt of its run was approved). SQLite cannot
-- alter a CHECK, so both tables are rebuilt as 0010 rebuilt runs, every
-- column, row and index kept.
CREATE TABLE change_requests_new (
    id              TEXT PRIMARY KEY,
    run_id          TEXT NOT NULL REFERENCES runs(id),
    session_id      TEXT NOT NULL DEFAULT '',
    number          INTEGER NOT NULL,
    title           TEXT NOT NULL,
    author          TEXT NOT NULL,
    base_commit     TEXT NOT NULL,
    tree            TEXT NOT NULL,
    manifest_sha256 TEXT NOT NULL,
    files           INTEGER NOT NULL DEFAULT 0,
    insertions      INTEGER NOT NULL DEFAULT 0,
    deletions       INTEGER NOT NULL DEFAULT 0,
    status          TEXT NOT NULL DEFAULT 'open'
        CHECK (status IN ('open', 'approved', 'rejected', 'changes_requested', 'superseded')),
    created_at      INTEGER NOT NULL,
    version         INTEGER NOT NULL DEFAULT 1,
    UNIQUE (run_id, number)
);
INSERT INTO change_requests_new (id, run_id, session_id, number, title, author, base_commit, tree, manifest_sha256,
    files, insertions, deletions, status, created_at)
SELECT id, run_id, session_id, number, title, author, base_commit, tree, manifest_sha256,
    files, insertions, deletions, status, created_at
FROM change_requests;
DROP TABLE change_requests;
ALTER TABLE change_requests_new RENAME TO change_requests;
CREATE INDEX change_requests_by_status ON change_requests (status, created_at);

CREATE TABLE change_request_reviews_new (
    cr_id      TEXT NOT NULL REFERENCES change_requests(id),
    seq        INTEGER NOT NULL,
    decision   TEXT NOT NULL CHECK (decision IN ('approved', 'rejected', 'changes_requested', 'superseded')),
    reviewer   TEXT NOT NULL,
    note       TEXT NOT NULL DEFAULT '',
    decided_at INTEGER NOT NULL,
    -- the version the decision is about
    version    INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (cr_id, seq)
);
INSERT INTO change_request_reviews_new (cr_id, seq, decision, reviewer, note, decided_at)
SELECT cr_id, seq,
    CASE WHEN decision = 'rejected' AND substr(note, 1, 19) = 'changes requested: ' THEN 'changes_requested' ELSE decision END,
    reviewer,
    CASE WHEN decision = 'rejected' AND substr(note, 1, 19) = 'changes requested: ' THEN substr(note, 20) ELSE note END,
    decided_at
FROM change_request_reviews;
DROP TABLE change_request_reviews;
ALTER TABLE change_request_reviews_new RENAME TO change_request_reviews;
UPDATE change_requests SET status = 'changes_requested'
    WHERE status = 'rejected' AND (SELECT decision FROM change_request_reviews r WHERE r.cr_id = change_requests.id
        ORDER BY seq DESC LIMIT 1) = 'changes_requested';

-- Every version of every change request, the first included.
CREATE TABLE change_request_versions (
    cr_id           TEXT NOT NULL REFERENCES change_requests(id),
    version         INTEGER NOT NULL,
    -- where its package is: runs/<run_id>/change_requests/<number>/, beside
    -- the steps it holds as evidence and the objects of its commits
    run_id          TEXT NOT NULL REFERENCES runs(id),
    session_id      TEXT NOT NULL DEFAULT '',
    number          INTEGER NOT NULL,
    tree            TEXT NOT NULL,
    manifest_sha256 TEXT NOT NULL,
    files           INTEGER NOT NULL DEFAULT 0,
    insertions      INTEGER NOT NULL DEFAULT 0,
    deletions       INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    PRIMARY KEY (cr_id, version),
    UNIQUE (run_id, number)
);
INSERT INTO change_request_versions (cr_id, version, run_id, session_id, number, tree, manifest_sha256,
    files, insertions, deletions, created_at)
SELECT id, 1, run_id, session_id, number, tree, manifest_sha256, files, insertions, deletions, created_at
FROM change_requests;

-- The comments a review made on lines of a version's diff: the new side
-- (a line of that version's tree) or the old (a line of the base).
CREATE TABLE change_request_comments (
    cr_id      TEXT NOT NULL REFERENCES change_requests(id),
    review_seq INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    version    INTEGER NOT NULL,
    path       TEXT NOT NULL,
    side       TEXT NOT NULL CHECK (side IN ('new', 'old')),
    line       INTEGER NOT NULL,
    text       TEXT NOT NULL,
    PRIMARY KEY (cr_id, review_seq, seq)
);
