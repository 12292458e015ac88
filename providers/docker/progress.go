package docker

import (
	"fmt"
	"io"

	"github.com/mattn/go-isatty"

	"github.com/xmode/xmode/providers/docker/internal/dockerapi"
)

// renderPull writes an image pull's progress stream to out the way
// `docker pull` shows it, and returns the error the daemon reported in the
// stream, if any.
//
// On a terminal each layer keeps one line ("<id>: <status> <progress>")
// that is rewritten in place as its progress changes (cursor up, clear
// line, rewrite, cursor down). Elsewhere (a log, a pipe) progress-bar
// updates are left out and every other message is one line, so a log
// shows each layer's steps once.
func renderPull(stream io.Reader, out io.Writer) error {
	f, ok := out.(interface{ Fd() uintptr })
	tty := ok && isatty.IsTerminal(f.Fd())
	lines := map[string]int{} // layer id -> its line, counted from the first
	return dockerapi.DecodeStream(stream, func(m dockerapi.JSONMessage) {
		layer := m.ID != "" && m.ProgressDetail != nil
		bar := m.ProgressDetail != nil && (m.ProgressDetail.Current > 0 || m.ProgressDetail.Total > 0)
		switch {
		case !tty && bar:
			// A progress bar is noise in a log.
		case m.Stream != "":
			fmt.Fprint(out, m.Stream)
		case !tty:
			fmt.Fprintln(out, line(m, false))
		case !layer:
			// Not a layer's line: what follows starts a new block, and
			// later progress must not move the cursor over this line.
			lines = map[string]int{}
			fmt.Fprintln(out, line(m, true))
		default:
			n, seen := lines[m.ID]
			if !seen {
				n = len(lines)
				lines[m.ID] = n
				fmt.Fprint(out, "\n")
			}
			up := len(lines) - n
			// Up to the layer's line, clear it, rewrite it, back down.
			fmt.Fprintf(out, "\x1b[%dA\r\x1b[2K%s\x1b[%dB\r", up, line(m, true), up)
		}
	})
}

// line is one message as text: "<id>: <status> <progress>".
func line(m dockerapi.JSONMessage, withProgress bool) string {
	s := m.Status
	if m.ID != "" {
		s = m.ID + ": " + s
	}
	if withProgress && m.Progress != "" {
		s += " " + m.Progress
	}
	return s
}
