package mcpserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"

	"golang.org/x/sync/semaphore"

	"github.com/xmode/xmode/internal/httpserve"
)

// What messages in flight may cost. A message is decoded into several
// copies (the body or line, the SDK's message, a tool's arguments, a
// file's bytes), so ten 63 MiB requests at once took a server to 2.2 GB.
// The bytes of the messages a server is reading or handling are bounded
// by one budget (a weighted semaphore), over HTTP bodies and stdio lines
// alike: a large message waits for room (on stdio, so does the client's
// writing), and a message holds its share until it is answered. Only
// file_write and file_edit carry file content; any other message is
// refused past SmallMessageBytes, before it is read whole.
const (
	// SmallMessageBytes is the most a message other than a file_write or
	// file_edit call may hold.
	SmallMessageBytes = 1 << 20
	// MessageBudget is the bytes of messages in flight at once: one
	// message of MaxMessageBytes, and room beside it for small ones.
	MessageBudget = MaxMessageBytes + 16*SmallMessageBytes
)

// contentTools are the tools whose arguments carry a file's content.
var contentTools = map[string]bool{"file_write": true, "file_edit": true}

// messageKind reads the start of a JSON-RPC message for its method and, for
// a tools/call, its tool (params.name, which clients write before
// arguments): what decides how large it may be.
func messageKind(head []byte) (method, tool string) {
	dec := json.NewDecoder(bytes.NewReader(head))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", ""
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return method, tool
		}
		switch t {
		case "method":
			if err := dec.Decode(&method); err != nil {
				return method, tool
			}
		case "params":
			if t, err := dec.Token(); err != nil || t != json.Delim('{') {
				return method, tool
			}
			for dec.More() {
				k, err := dec.Token()
				if err != nil || k == "arguments" {
					return method, tool
				}
				if k == "name" {
					if err := dec.Decode(&tool); err != nil {
						return method, tool
					}
					continue
				}
				var skip json.RawMessage
				if err := dec.Decode(&skip); err != nil {
					return method, tool
				}
			}
			if _, err := dec.Token(); err != nil {
				return method, tool
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return method, tool
			}
		}
		if method != "" && (method != "tools/call" || tool != "") {
			return method, tool
		}
	}
	return method, tool
}

// takesContent: the message that starts with head may be large: a
// tools/call of a tool that takes file content (its method unread yet
// when its params come first).
func takesContent(head []byte) bool {
	method, tool := messageKind(head)
	return (method == "tools/call" || method == "") && contentTools[tool]
}

// tooLargeMessage says why a message is refused for its size, and what to
// do: head is its start, limit what it was allowed.
func tooLargeMessage(head []byte, limit int) string {
	if limit >= MaxMessageBytes {
		return fmt.Sprintf("the message is longer than %d bytes, the most xmode mcp reads: file contents beyond %d MiB go in with a command in the sandbox, or `xmode sandbox cp`", MaxMessageBytes, MaxMessageBytes>>20)
	}
	what := "a message other than a tools/call of file_write or file_edit"
	if method, tool := messageKind(head); method == "tools/call" && tool != "" {
		what = "a tools/call of " + tool
	} else if method != "" && method != "tools/call" {
		what = "a " + method + " message"
	}
	return fmt.Sprintf("the message is longer than 1 MiB, the most for %s: only file_write and file_edit take more (up to %d MiB, their name before their arguments); write large content with file_write, or produce it with a command in the sandbox", what, MaxMessageBytes>>20)
}

// limitBodies bounds the request bodies next reads and handles: each
// holds its bytes of the server's budget until it is answered; a body
// over SmallMessageBytes that is not a file_write or file_edit call, or
// over MaxMessageBytes, is refused with 413 and a JSON-RPC error. Only
// its start is read here: the SDK reads the rest, a copy fewer.
func (s *Server) limitBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > MaxMessageBytes {
			tooLarge(w, nil, MaxMessageBytes)
			return
		}
		held := int64(SmallMessageBytes)
		if err := s.budget.Acquire(r.Context(), held); err != nil {
			return // the client went away
		}
		defer func() { s.release(held) }()
		// Its turn came: the body's time to arrive counts from now.
		httpserve.ReadFromNow(r)
		head, err := io.ReadAll(io.LimitReader(r.Body, SmallMessageBytes+1))
		if err != nil {
			http.Error(w, "xmode mcp: reading the request: "+err.Error(), http.StatusBadRequest)
			return
		}
		switch {
		case len(head) <= SmallMessageBytes:
			s.budget.Release(held - int64(len(head)))
			held = int64(len(head))
		case !takesContent(head):
			tooLarge(w, head, SmallMessageBytes)
			return
		default:
			want := int64(MaxMessageBytes)
			if r.ContentLength > 0 {
				want = r.ContentLength
			}
			if err := s.budget.Acquire(r.Context(), want-held); err != nil {
				return
			}
			held = want
			httpserve.ReadFromNow(r)
		}
		body := io.MultiReader(bytes.NewReader(head), io.LimitReader(r.Body, MaxMessageBytes+1-int64(len(head))))
		r.Body = &sizedBody{Reader: body, Closer: r.Body, w: w, head: head}
		next.ServeHTTP(w, r)
	})
}

// sizedBody is a request body that fails past MaxMessageBytes, answering
// 413 itself as http.MaxBytesReader would (the SDK answers too: whichever
// writes first).
type sizedBody struct {
	io.Reader
	io.Closer
	w    http.ResponseWriter
	head []byte
	n    int64
}

func (b *sizedBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	b.n += int64(n)
	if b.n > MaxMessageBytes {
		return n, &http.MaxBytesError{Limit: MaxMessageBytes}
	}
	return n, err
}

// release gives back what a message held; after a large one, it collects
// the garbage the message's copies left at once, before the next large
// one grows the heap again: its cost is the heap still live, which is
// small by then.
func (s *Server) release(n int64) {
	s.budget.Release(n)
	if n > SmallMessageBytes {
		runtime.GC()
	}
}

// tooLarge answers a body refused for its size: 413, and a JSON-RPC error
// with the request's id when its start says it.
func tooLarge(w http.ResponseWriter, head []byte, limit int) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusRequestEntityTooLarge)
	w.Write(errorReply(-32600, idOf(head), "%s", tooLargeMessage(head, limit)))
}

// newBudget is a server's budget of bytes of messages in flight.
func newBudget() *semaphore.Weighted { return semaphore.NewWeighted(MessageBudget) }
