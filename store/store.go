// Package store is xmode's embedded session store: one SQLite file,
// <root>/xmode.db, shared by every xmode process on the machine (a developer,
// CI, cron). Pragmas live in the DSN so every pooled connection has them;
// writes use immediate transactions so a read-then-write never fails with
// SQLITE_BUSY; migrations are embedded and applied on open.
package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"embed"
	"encoding/base32"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite" // also registers the "sqlite" driver

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// FileName is the database's name inside the storage root.
const FileName = "xmode.db"

// Store is an open session store.
type Store struct {
	db    *sql.DB
	path  string
	guard fsguard.Guard // derives each session's run_dir
	stmts sync.Map      // query → *sql.Stmt: see stmt
}

// Open opens (creating if needed) the store under root and migrates it. A
// root that has been used (runs/, project_machines/, xmode.instance) but
// whose database is missing, empty or another install's is refused
// (ErrLost): see Adopt.
func Open(ctx context.Context, root string) (*Store, error) {
	if err := fsguard.MkdirRoot(root); err != nil {
		return nil, err
	}
	id, err := readIdentity(root)
	if err != nil {
		return nil, err
	}
	if err := id.checkBeforeOpen(); err != nil {
		return nil, err
	}
	s, err := openDB(ctx, root, id, "")
	if err != nil {
		return nil, err
	}
	if err := s.checkAfterOpen(ctx, id); err != nil {
		s.Close()
		return nil, err
	}
	keepReserve(root)
	return s, nil
}

// openDB opens the database and migrates it. A new database gets instance as
// its ID ("" for a fresh one); one that is new where id says the root was
// used is refused inside the migration, before anything is written.
func openDB(ctx context.Context, root string, id identity, instance string) (*Store, error) {
	path := filepath.Join(root, FileName)
	// wal_autocheckpoint(100): the CLI leaves its connection to process exit
	// (see cmd.App.Run), so every command's first connection rebuilds the
	// WAL index by reading the whole WAL. At SQLite's default of 1000 pages
	// (4 MB) that read costs as much as the close it replaced; at 100 pages
	// it stays under a millisecond, and a checkpoint every ~15 commands
	// costs less.
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() +
		"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)" +
		"&_pragma=synchronous(NORMAL)&_pragma=wal_autocheckpoint(100)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// One connection per process: SQLite allows one writer anyway, and a
	// single connection cannot deadlock against itself across transactions.
	db.SetMaxOpenConns(1)
	s := &Store{db: db, path: path, guard: fsguard.Guard{Root: root}}
	// Opening a brand-new database races other processes switching it to
	// WAL, where SQLite reports SQLITE_BUSY without consulting busy_timeout;
	// such a first open is retried for as long as busy_timeout would wait.
	deadline := time.Now().Add(20 * time.Second)
	for attempt := 1; ; attempt++ {
		err = s.migrate(ctx, id, instance)
		if err == nil {
			// The store holds --env values and what steps printed: the
			// owner's alone. SQLite gives the WAL the database's mode.
			for _, f := range []string{path, path + "-wal", path + "-shm"} {
				_ = os.Chmod(f, 0o600)
			}
			return s, nil
		}
		if !isBusy(err) || time.Now().After(deadline) {
			db.Close()
			return nil, s.writeError(err)
		}
		select {
		case <-ctx.Done():
			db.Close()
			return nil, ctx.Err()
		case <-time.After(time.Duration(min(attempt, 20)) * 5 * time.Millisecond):
		}
	}
}

// isBusy reports SQLITE_BUSY (and its extended codes).
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == 5
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

type migration struct {
	version int
	name    string
	sql     string
}

// migrationNames lists the embedded migrations in order, checked to be
// numbered 1, 2, 3… without gaps: how many there are is the schema version
// this binary knows. It reads names only, once per process: a database at
// that version (every command but the first after an upgrade) needs nothing
// more, and reading and copying the SQL of every migration was part of the
// cost of every command.
var migrationNames = sync.OnceValues(func() ([]string, error) {
	entries, err := migrationFS.ReadDir("migrations")
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		var v int
		if _, err := fmt.Sscanf(e.Name(), "%04d_", &v); err != nil {
			return nil, fmt.Errorf("migration %s: name must start with a 4-digit version", e.Name())
		}
		if v != i+1 { // ReadDir sorts by name, so by version
			return nil, fmt.Errorf("migration %s: versions must run 1, 2, 3… without gaps", e.Name())
		}
		names[i] = e.Name()
	}
	return names, nil
})

// migrations reads every migration's SQL: only when one is to be applied.
func migrations() ([]migration, error) {
	names, err := migrationNames()
	if err != nil {
		return nil, err
	}
	ms := make([]migration, len(names))
	for i, name := range names {
		b, err := migrationFS.ReadFile("migrations/" + name)
		if err != nil {
			return nil, err
		}
		ms[i] = migration{version: i + 1, name: name, sql: string(b)}
	}
	return ms, nil
}

// SchemaVersion is the newest schema this binary knows.
func SchemaVersion() int {
	names, _ := migrationNames()
	return len(names)
}

// migrate applies pending migrations in one immediate transaction, so two
// processes opening a new database at once apply them exactly once. A new
// database in a root id says was used is refused; a new one gets instance
// as its ID, or a fresh one.
func (s *Store) migrate(ctx context.Context, id identity, instance string) error {
	names, err := migrationNames()
	if err != nil {
		return err
	}
	// One read decides: a current database is used as it is.
	var have int
	if err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&have); err != nil {
		return fmt.Errorf("read schema version of %s: %w", s.path, err)
	}
	if have == len(names) {
		return nil
	}
	if have > len(names) {
		return schemaTooNew(s.path, have, len(names))
	}
	ms, err := migrations()
	if err != nil {
		return err
	}
	// Foreign keys are off while migrations run, so one can rebuild a table
	// others refer to (SQLite's procedure for changes ALTER TABLE cannot
	// make); foreign_key_check then proves the result consistent before it
	// commits. The pragma is a no-op inside a transaction, hence the pinned
	// connection.
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", s.path, err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "PRAGMA foreign_keys = OFF"); err != nil {
		return fmt.Errorf("migrate %s: %w", s.path, err)
	}
	err = s.applyMigrations(ctx, conn, ms, id, instance)
	if _, ferr := conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA foreign_keys = ON"); ferr != nil {
		// A pooled connection without foreign keys must not survive.
		conn.Raw(func(any) error { return driver.ErrBadConn })
		if err == nil {
			err = fmt.Errorf("migrate %s: turn foreign keys back on: %w", s.path, ferr)
		}
	}
	return err
}

func (s *Store) applyMigrations(ctx context.Context, conn *sql.Conn, ms []migration, id identity, instance string) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	defer tx.Rollback()
	var have int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&have); err != nil {
		return err
	}
	if have > len(ms) {
		return schemaTooNew(s.path, have, len(ms))
	}
	if have == len(ms) {
		return nil // another process migrated it meanwhile
	}
	if have == 0 && id.used() {
		return id.lost("has no xmode schema (a new or foreign database)")
	}
	for _, m := range ms[have:] {
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("apply migration %s: %w", m.name, err)
		}
	}
	if have == 0 {
		if instance == "" {
			instance = newID("")
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO meta(key, value) VALUES ('instance', ?)", instance); err != nil {
			return err
		}
	}
	if err := foreignKeyCheck(ctx, tx); err != nil {
		return fmt.Errorf("migrate %s: %w", s.path, err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(ms))); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// foreignKeyCheck fails when a row refers to a row that does not exist.
func foreignKeyCheck(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, "PRAGMA foreign_key_check")
	if err != nil {
		return err
	}
	defer rows.Close()
	if rows.Next() {
		var table, parent string
		var rowid sql.NullInt64
		var fk int
		if err := rows.Scan(&table, &rowid, &parent, &fk); err != nil {
			return err
		}
		return fmt.Errorf("a row of %s refers to a missing row of %s after the migration", table, parent)
	}
	return rows.Err()
}

func schemaTooNew(path string, have, know int) error {
	return fail.Failedf("%s has schema version %d, newer than this xmode understands (%d): upgrade xmode, or point %s at another directory", path, have, know, fail.StorageRoot)
}

// InstanceID identifies this storage root; the docker labels carry it so the
// reaper only ever touches objects of its own install.
func (s *Store) InstanceID(ctx context.Context) (string, error) {
	var id string
	err := s.db.QueryRowContext(ctx, "SELECT value FROM meta WHERE key = 'instance'").Scan(&id)
	if err != nil {
		return "", fmt.Errorf("read instance id: %w", err)
	}
	return id, nil
}

// stmt returns q prepared once per process: the driver parses every
// statement it is given, and a loop that runs a statement per row (a poll
// pass) would spend its time in SQLite's parser. Call it outside a
// transaction (preparing needs the one connection), and use the statement
// inside one with tx.StmtContext.
func (s *Store) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	if v, ok := s.stmts.Load(q); ok {
		return v.(*sql.Stmt), nil
	}
	st, err := s.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	if v, loaded := s.stmts.LoadOrStore(q, st); loaded {
		st.Close()
		return v.(*sql.Stmt), nil
	}
	return st, nil
}

// tx runs fn in an immediate transaction (the DSN's _txlock). On a full
// disk it gives back a chunk of the reserve and runs fn again (see exec).
func (s *Store) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	err := s.tx1(ctx, fn)
	for i := 0; i < reserveTries && err != nil && isFull(err) && s.releaseReserve(); i++ {
		err = s.tx1(ctx, fn)
	}
	return s.writeError(err)
}

func (s *Store) tx1(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newID returns prefix + 8 lowercase base32 characters (40 random bits).
func newID(prefix string) string {
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return prefix + idEncoding.EncodeToString(b[:])
}

// NewSessionID returns a fresh sbx_ id.
func NewSessionID() string { return newID("sbx_") }

// NewRunID returns a fresh run_ id.
func NewRunID() string { return newID("run_") }

// ParseSessionRef normalises what a user typed for a session: the full ID or
// any prefix of it, with or without "sbx_", at least 4 characters.
func ParseSessionRef(ref string) (string, error) {
	if len(ref) < 4 {
		return "", fail.Usagef("session %q is too short: give at least 4 characters of its ID", ref)
	}
	rest := strings.TrimPrefix(ref, "sbx_")
	if rest == "" {
		return "", fail.Usagef("session %q is too short: give at least 4 characters of its ID", ref)
	}
	if len(rest) > 32 {
		return "", fail.NotFoundf("no session %s", ref)
	}
	for _, r := range rest {
		if !(r >= 'a' && r <= 'z' || r >= '2' && r <= '7') {
			return "", fail.NotFoundf("no session %s: IDs look like sbx_7k2m9q4x", ref)
		}
	}
	return "sbx_" + rest, nil
}

// errNoRows turns sql.ErrNoRows into a NotFound error.
func errNoRows(err error, format string, args ...any) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fail.NotFoundf(format, args...)
	}
	return err
}
