// Command storefloor does the store work of one `xmode sandbox exec` — open
// the store, resolve the session, begin and finish a step — and nothing
// else: no cobra, no configuration, no evidence files, no child process.
// `make bench` times it beside xmode to show how much of exec's overhead is
// the embedded SQLite alone (modernc's package init, the connection, the
// schema, two write transactions) on the machine at hand.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/xmode/xmode/store"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: storefloor STORAGE_ROOT SESSION")
		os.Exit(2)
	}
	if err := run(context.Background(), os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "storefloor:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, root, ref string) error {
	st, err := store.Open(ctx, root)
	if err != nil {
		return err
	}
	// Left open at exit, as the CLI leaves it (cmd.App.Run).
	sess, err := st.Resolve(ctx, ref)
	if err != nil {
		return err
	}
	now := time.Now()
	seq, _, err := st.BeginStep(ctx, store.NewStep{SessionID: sess.ID, RunID: sess.RunID, Name: "floor", Argv: []string{"true"}, Started: now,
		DirFor: func(seq int) string {
			return filepath.Join(root, "runs", sess.RunID, "steps", fmt.Sprintf("%04d-floor", seq))
		}})
	if err != nil {
		return err
	}
	_, err = st.FinishStep(ctx, store.StepEnd{RunID: sess.RunID, Seq: seq, Finished: time.Now()})
	return err
}
