-- Change requests (docs/change-requests.md): one row per package under
-- runs/<run>/change_requests/<number>/. The package files are immutable;
-- manifest_sha256 pins manifest.json (which pins the other files), so a
-- package rewritten on disk is found by `cr verify`. status is the latest
-- review decision ('open' until the first one), kept in the same
-- transaction that records the decision.
CREATE TABLE change_requests (
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
    status          TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'approved', 'rejected')),
    created_at      INTEGER NOT NULL,
    UNIQUE (run_id, number)
);
CREATE INDEX change_requests_by_status ON change_requests (status, created_at);

-- Every review decision, in order; none is ever changed or removed.
CREATE TABLE change_request_reviews (
    cr_id      TEXT NOT NULL REFERENCES change_requests(id),
    seq        INTEGER NOT NULL,
    decision   TEXT NOT NULL CHECK (decision IN ('approved', 'rejected')),
    reviewer   TEXT NOT NULL,
    note       TEXT NOT NULL DEFAULT '',
    decided_at INTEGER NOT NULL,
    PRIMARY KEY (cr_id, seq)
);
