package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/xmode/xmode/fail"
)

// CheckRoomFor refuses n more sessions of user when they would take the
// user past limit open, unexpired sessions (0: unlimited): `xmode run
// --attempts N` asks before its first sandbox starts, so that N attempts
// beyond the quota start none. Each create still checks the quota as it
// inserts its session.
func (s *Store) CheckRoomFor(ctx context.Context, user string, limit, n int, now time.Time) error {
	if limit <= 0 {
		return nil
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM sessions
		WHERE user = ? AND status IN (`+activeStatuses+`) AND expires_at > ? ORDER BY created_at`, user, millis(now))
	if err != nil {
		return fmt.Errorf("count open sessions: %w", err)
	}
	defer rows.Close()
	var open []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		open = append(open, id)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(open)+n > limit {
		which := ""
		if len(open) > 0 {
			which = ": " + strings.Join(open, ", ")
		}
		return fail.Refusedf("%d attempts need %d sandboxes, and user %s has %d open of the limit (XMODE_SANDBOX_MAX_OPEN=%d)%s; ask for at most %d attempts (%s), free sandboxes with `xmode sandbox stop ID`, or raise the limit",
			n, n, user, len(open), limit, which, max(0, limit-len(open)), fail.Attempts)
	}
	return nil
}
