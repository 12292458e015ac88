package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/proc"
)

// NetworkPolicy is a session's egress policy as recorded (docs/reference.md,
// "Network policy"; docs/network.md): the mode, each rule with the source it
// came from, the credentials (where the secret is, never the secret) and the
// names the proxy resolves itself. A session whose network is not proxied
// has none.
type NetworkPolicy struct {
	Mode        string              `json:"mode"`
	Allow       []NetworkRule       `json:"allow"`
	Deny        []NetworkRule       `json:"deny"`
	Credentials []NetworkCredential `json:"credentials"`
	Resolve     []NetworkResolve    `json:"resolve"`
}

// NetworkRule is one allow or deny rule as written, and where it came from
// (--allow, plan, agent claude, XMODE_SANDBOX_ALLOW…).
type NetworkRule struct {
	Rule   string `json:"rule"`
	Source string `json:"source"`
}

// NetworkCredential is a header the proxy adds on requests to one host,
// from a variable of xmode's environment or a file (From), the sandbox
// holding Placeholder instead.
type NetworkCredential struct {
	Host        string `json:"host"`
	Header      string `json:"header"`
	From        string `json:"from"`
	Placeholder string `json:"placeholder"`
	Source      string `json:"source"`
}

// NetworkResolve is a name the proxy resolves to these addresses.
type NetworkResolve struct {
	Name      string   `json:"name"`
	Addresses []string `json:"addresses"`
	Source    string   `json:"source"`
}

// encodePolicy is the column's value: NULL for no policy.
func encodePolicy(p *NetworkPolicy) (any, error) {
	if p == nil {
		return nil, nil
	}
	b, err := json.Marshal(p.normal())
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// normal has empty lists rather than nulls, as the JSON promises.
func (p *NetworkPolicy) normal() *NetworkPolicy {
	q := *p
	if q.Allow == nil {
		q.Allow = []NetworkRule{}
	}
	if q.Deny == nil {
		q.Deny = []NetworkRule{}
	}
	if q.Credentials == nil {
		q.Credentials = []NetworkCredential{}
	}
	if q.Resolve == nil {
		q.Resolve = []NetworkResolve{}
	}
	return &q
}

func decodePolicy(id string, col sql.NullString) (*NetworkPolicy, error) {
	if !col.Valid {
		return nil, nil
	}
	var p NetworkPolicy
	if err := json.Unmarshal([]byte(col.String), &p); err != nil {
		return nil, fmt.Errorf("session %s: bad network_policy column: %w", id, err)
	}
	return p.normal(), nil
}

// SetNetworkPolicy replaces a session's policy with next if it is still
// prev (compared as recorded): a change made meanwhile by another xmode is
// refused rather than lost.
func (s *Store) SetNetworkPolicy(ctx context.Context, id string, prev, next *NetworkPolicy) error {
	old, err := encodePolicy(prev)
	if err != nil {
		return err
	}
	val, err := encodePolicy(next)
	if err != nil {
		return err
	}
	return s.tx(ctx, func(tx *sql.Tx) error {
		var cur sql.NullString
		if err := tx.QueryRowContext(ctx, `SELECT network_policy FROM sessions WHERE id = ?`, id).Scan(&cur); err != nil {
			return errNoRows(err, "no session %s", id)
		}
		if (old == nil) != !cur.Valid || old != nil && cur.String != old.(string) {
			return fail.Refusedf("the network policy of %s was changed meanwhile (by another xmode): look at it again with `xmode sandbox network %s` and repeat the change", id, id)
		}
		_, err := tx.ExecContext(ctx, `UPDATE sessions SET network_policy = ? WHERE id = ?`, val, id)
		return err
	})
}

// Port is a sandbox port published on the host (`sandbox port`): a row of
// ports (docs/reference.md, "Port").
type Port struct {
	SessionID string     `json:"session_id"`
	Port      int        `json:"port"`
	HostAddr  string     `json:"host_addr"` // host:port it listens on
	URL       string     `json:"url"`
	Owner     string     `json:"-"` // the forwarder process (internal/proc)
	OpenedAt  time.Time  `json:"opened_at"`
	ClosedAt  *time.Time `json:"closed_at"`
	Error     string     `json:"-"` // why it closed, when it failed
}

// Live reports whether the port is open: not closed, and its forwarder
// not certainly gone.
func (p *Port) Live() bool {
	return p.ClosedAt == nil && (p.Owner == "" || !proc.Gone(p.Owner))
}

// OpenPort records a port about to be published; a port the session has
// open already (its forwarder alive) is refused.
func (s *Store) OpenPort(ctx context.Context, p Port) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		var owner string
		err := tx.QueryRowContext(ctx, `SELECT owner FROM ports WHERE session_id = ? AND port = ? AND closed_at IS NULL`, p.SessionID, p.Port).Scan(&owner)
		switch {
		case err == sql.ErrNoRows:
		case err != nil:
			return err
		case owner == "" || !proc.Gone(owner):
			return fail.Refusedf("port %d of %s is published already: `xmode sandbox show %s` lists its address", p.Port, p.SessionID, p.SessionID)
		default:
			// Its forwarder died: the row is history.
			if _, err := tx.ExecContext(ctx, `UPDATE ports SET closed_at = ?, error = 'its forwarder was gone' WHERE session_id = ? AND port = ? AND closed_at IS NULL`,
				millis(p.OpenedAt), p.SessionID, p.Port); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO ports (session_id, port, host_addr, owner, opened_at) VALUES (?, ?, ?, ?, ?)`,
			p.SessionID, p.Port, p.HostAddr, p.Owner, millis(p.OpenedAt))
		return err
	})
}

// SetPortServing records the forwarder of an open port and where it
// listens (its address once bound: the port the kernel chose for :0).
func (s *Store) SetPortServing(ctx context.Context, sessionID string, port int, hostAddr, owner string) error {
	_, err := s.db.ExecContext(ctx, `UPDATE ports SET host_addr = ?, owner = ? WHERE session_id = ? AND port = ? AND closed_at IS NULL`,
		hostAddr, owner, sessionID, port)
	return err
}

// ClosePort marks an open port closed, with why when it failed.
func (s *Store) ClosePort(ctx context.Context, sessionID string, port int, now time.Time, why string) error {
	_, err := s.db.ExecContext(ctx, `UPDATE ports SET closed_at = ?, error = CASE WHEN ? = '' THEN error ELSE ? END
		WHERE session_id = ? AND port = ? AND closed_at IS NULL`, millis(now), why, why, sessionID, port)
	return err
}

// Ports lists a session's ports, open ones only unless all.
func (s *Store) Ports(ctx context.Context, sessionID string, all bool) ([]Port, error) {
	q := `SELECT session_id, port, host_addr, owner, opened_at, closed_at, error FROM ports WHERE session_id = ?`
	if !all {
		q += ` AND closed_at IS NULL`
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY opened_at, port`, sessionID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Port
	for rows.Next() {
		var p Port
		var opened int64
		var closed sql.NullInt64
		if err := rows.Scan(&p.SessionID, &p.Port, &p.HostAddr, &p.Owner, &opened, &closed, &p.Error); err != nil {
			return nil, err
		}
		p.OpenedAt = fromMillis(opened)
		if closed.Valid {
			t := fromMillis(closed.Int64)
			p.ClosedAt = &t
		}
		p.URL = "http://" + p.HostAddr + "/"
		out = append(out, p)
	}
	return out, rows.Err()
}
