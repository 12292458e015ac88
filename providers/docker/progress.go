package docker

import (
	"io"

	"github.com/docker/docker/pkg/jsonmessage"
	"github.com/mattn/go-isatty"
)

// renderPull writes an image pull's progress stream to out the way
// `docker pull` shows it (the docker CLI's own renderer: each layer's line
// rewritten in place on a terminal, one line per message elsewhere) and
// returns the error the daemon reported in the stream, if any.
func renderPull(stream io.Reader, out io.Writer) error {
	var fd uintptr
	tty := false
	if f, ok := out.(interface{ Fd() uintptr }); ok {
		fd = f.Fd()
		tty = isatty.IsTerminal(fd)
	}
	return jsonmessage.DisplayJSONMessagesStream(stream, out, fd, tty, nil)
}
