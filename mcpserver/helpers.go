package mcpserver

import (
	"bytes"
	"errors"
	"time"

	"github.com/xmode/xmode/fail"
)

// Helpers the toolsets share.

func ptr[T any](v T) *T { return &v }

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// xmodeCommand is an xmode command line for the user, with the server's
// --storage-root when it is not the default.
func (s *Server) xmodeCommand(args ...string) string {
	x := "xmode"
	if s.o.StorageRootArg != "" {
		x += " --storage-root " + fail.ShellWord(s.o.StorageRootArg)
	}
	for _, a := range args {
		x += " " + fail.ShellWord(a)
	}
	return x
}

// errCapped ends a write past a capWriter's cap.
var errCapped = errors.New("output capped")

// capWriter keeps the first max bytes written to it, then fails.
type capWriter struct {
	buf bytes.Buffer
	max int
	cut bool
}

func (w *capWriter) Write(p []byte) (int, error) {
	room := w.max - w.buf.Len()
	if len(p) > room {
		w.buf.Write(p[:max(room, 0)])
		w.cut = true
		return max(room, 0), errCapped
	}
	return w.buf.Write(p)
}
