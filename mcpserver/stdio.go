package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sync/semaphore"
)

// MaxMessageBytes bounds one JSON-RPC message (a line on stdio, a request
// body over HTTP): room for a file_write of sandbox.MaxFileBytes however
// its JSON escapes it. A longer line is answered with an error and skipped;
// a message other than a file_write or file_edit call is bounded lower
// (SmallMessageBytes, bodies.go).
const MaxMessageBytes = 64 << 20

// lineTransport is the stdio transport: newline-delimited JSON-RPC, as the
// SDK's StdioTransport, except that a line that is no JSON-RPC message (not
// JSON, a batch, a line too long) is answered with a JSON-RPC error — parse
// error or invalid request, with the request's id when it can be read — and
// the server reads on. The SDK's own transport ends the session at the
// first such line, so one bad message from a client would cost it every
// sandbox tool until it restarts the server. A line holds its bytes of the
// server's budget (bodies.go) from before it is read until it is answered:
// while there is no room, the server reads no further and the client's
// writes wait.
type lineTransport struct {
	r       io.Reader
	w       io.Writer
	budget  *semaphore.Weighted
	release func(int64)
}

func (t *lineTransport) Connect(context.Context) (mcp.Connection, error) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &lineConn{w: t.w, incoming: make(chan lineMsg), closed: make(chan struct{}), budget: t.budget, release: t.release,
		ctx: ctx, cancel: cancel, pending: map[string][]int64{}}
	go c.readLoop(t.r)
	return c, nil
}

type lineMsg struct {
	msg jsonrpc.Message
	err error
}

type lineConn struct {
	w         io.Writer
	wmu       sync.Mutex
	incoming  chan lineMsg
	closed    chan struct{}
	closeOnce sync.Once

	// budget is the server's, release how it is given back; ctx ends a
	// wait for room when the connection closes; pending is what each
	// request being handled holds of the budget, by its id, until its
	// response is written.
	budget  *semaphore.Weighted
	release func(int64)
	ctx     context.Context
	cancel  context.CancelFunc
	pmu     sync.Mutex
	pending map[string][]int64
}

// readLoop reads lines until r ends, handing each message to Read and
// answering each line that is not one.
func (c *lineConn) readLoop(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		held := int64(SmallMessageBytes)
		if err := c.budget.Acquire(c.ctx, held); err != nil {
			c.deliver(lineMsg{err: io.EOF})
			return
		}
		line, tooLong, limit, err := c.readLine(br, &held)
		if len(bytes.TrimSpace(line)) > 0 || tooLong {
			if msg, reply := decodeLine(line, tooLong, limit); reply != nil {
				c.budget.Release(held)
				if werr := c.writeRaw(reply); werr != nil {
					c.deliver(lineMsg{err: werr})
					return
				}
			} else {
				c.hold(msg, held, int64(len(line)))
				if !c.deliver(lineMsg{msg: msg}) {
					return
				}
			}
		} else {
			c.budget.Release(held)
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
				err = io.EOF
			}
			c.deliver(lineMsg{err: err})
			return
		}
	}
}

// hold keeps size of the held bytes of the budget for a request until its
// response is written (answered), and gives back the rest; a message that
// gets no response gives all back.
func (c *lineConn) hold(msg jsonrpc.Message, held, size int64) {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.ID.IsValid() {
		c.budget.Release(held)
		return
	}
	size = min(size, held)
	c.budget.Release(held - size)
	key := idKey(req.ID)
	c.pmu.Lock()
	c.pending[key] = append(c.pending[key], size)
	c.pmu.Unlock()
}

// answered gives back what the request of id held.
func (c *lineConn) answered(id jsonrpc.ID) {
	key := idKey(id)
	c.pmu.Lock()
	held := c.pending[key]
	var n int64
	if len(held) > 0 {
		n = held[0]
		if held = held[1:]; len(held) == 0 {
			delete(c.pending, key)
		} else {
			c.pending[key] = held
		}
	}
	c.pmu.Unlock()
	if n > 0 {
		c.release(n)
	}
}

func idKey(id jsonrpc.ID) string { return fmt.Sprintf("%T:%v", id.Raw(), id.Raw()) }

// deliver hands m to Read; false once the connection is closed.
func (c *lineConn) deliver(m lineMsg) bool {
	select {
	case c.incoming <- m:
		return true
	case <-c.closed:
		return false
	}
}

// readLine reads up to a newline: at most SmallMessageBytes, or, for a line
// that starts as a file_write or file_edit call, MaxMessageBytes, holding
// room in the budget for what it may read (*held). A longer line is read to
// its end and dropped, keeping its first 64 KB (where a request's id is),
// with tooLong set; limit is the most it was allowed.
func (c *lineConn) readLine(br *bufio.Reader, held *int64) (line []byte, tooLong bool, limit int, err error) {
	limit = SmallMessageBytes
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong && limit < MaxMessageBytes && len(buf)+len(chunk) > limit && takesContent(append(buf[:len(buf):len(buf)], chunk...)) {
			if aerr := c.budget.Acquire(c.ctx, MaxMessageBytes-*held); aerr != nil {
				return buf, false, limit, aerr
			}
			*held, limit = MaxMessageBytes, MaxMessageBytes
			// Room for all it may hold at once, which the budget holds
			// anyway: growing by doubling would copy it over and over.
			// Pages it does not fill are never touched.
			buf = append(make([]byte, 0, MaxMessageBytes+64<<10), buf...)
		}
		switch {
		case tooLong:
		case len(buf)+len(chunk) > limit:
			tooLong = true
			keep := min(len(chunk), max(0, 64<<10-len(buf)))
			buf = append(buf, chunk[:keep]...)
		default:
			buf = append(buf, chunk...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return buf, tooLong, limit, err
	}
}

// rpcError is a JSON-RPC error response as the wire has it, with an id
// that may be null (which the SDK's encoder cannot write).
type rpcError struct {
	Version string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// errorReply is a JSON-RPC error response of id (null when none).
func errorReply(code int64, id json.RawMessage, format string, args ...any) []byte {
	r := rpcError{Version: "2.0", ID: id}
	if len(id) == 0 {
		r.ID = json.RawMessage("null")
	}
	r.Error.Code, r.Error.Message = code, fmt.Sprintf(format, args...)
	b, _ := json.Marshal(r)
	return b
}

// decodeLine is the message of a line, or the error response it gets; a
// line too long passed limit.
func decodeLine(line []byte, tooLong bool, limit int) (jsonrpc.Message, []byte) {
	if tooLong {
		return nil, errorReply(jsonrpc.CodeInvalidRequest, idOf(line), "%s", tooLargeMessage(line, limit))
	}
	trimmed := bytes.TrimSpace(line)
	if trimmed[0] == '[' {
		return nil, errorReply(jsonrpc.CodeInvalidRequest, nil, "JSON-RPC batches are not supported: send one message per line")
	}
	msg, err := jsonrpc.DecodeMessage(trimmed)
	if err == nil {
		return msg, nil
	}
	// Only a line that is no message is checked for being JSON at all: a
	// pass over every message's bytes saved (a file_write's content).
	if !json.Valid(trimmed) {
		return nil, errorReply(jsonrpc.CodeParseError, nil, "parse error: the line is not JSON (one JSON-RPC 2.0 message per line)")
	}
	return nil, errorReply(jsonrpc.CodeInvalidRequest, idOf(trimmed), "invalid request: %v", err)
}

// idOf is the "id" of a JSON object as it is written, read from the
// start of line (a message cut short included); nil when there is none to
// be had, or it is not a number or a string.
func idOf(line []byte) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(line))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if key == "id" {
			if len(v) > 0 && (v[0] == '"' || v[0] == '-' || (v[0] >= '0' && v[0] <= '9')) {
				return v
			}
			return nil
		}
	}
	return nil
}

func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case m := <-c.incoming:
		return m.msg, m.err
	case <-c.closed:
		return nil, io.EOF
	}
}

func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r, ok := msg.(*jsonrpc.Response); ok && r.ID.IsValid() {
		defer c.answered(r.ID)
	}
	if line := responseLine(msg); line != nil {
		return c.writeLine(line)
	}
	b, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("encode a message: %w", err)
	}
	return c.writeRaw(b)
}

// responseLine is a successful response as its line, newline included,
// its result copied as it is; nil for any other message. The SDK has
// already encoded the result, compact, and EncodeMessage would scan and
// copy all of it once more (a file_read's megabyte of content) to check
// and compact what already is. A result holding a newline (which would
// break the line) is left to EncodeMessage.
func responseLine(msg jsonrpc.Message) []byte {
	r, ok := msg.(*jsonrpc.Response)
	if !ok || r.Error != nil || !r.ID.IsValid() || len(r.Result) == 0 || bytes.IndexByte(r.Result, '\n') >= 0 {
		return nil
	}
	var idb bytes.Buffer
	enc := json.NewEncoder(&idb)
	enc.SetEscapeHTML(false) // as the SDK writes it
	if err := enc.Encode(r.ID.Raw()); err != nil {
		return nil
	}
	id := bytes.TrimRight(idb.Bytes(), "\n")
	line := make([]byte, 0, len(r.Result)+len(id)+32)
	line = append(line, `{"jsonrpc":"2.0","id":`...)
	line = append(line, id...)
	line = append(line, `,"result":`...)
	line = append(line, r.Result...)
	return append(line, "}\n"...)
}

// writeRaw writes one line.
func (c *lineConn) writeRaw(b []byte) error {
	return c.writeLine(append(b, '\n'))
}

// writeLine writes b, a line ending in its newline.
func (c *lineConn) writeLine(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.w.Write(b)
	return err
}

func (c *lineConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.cancel()
		// What requests never answered held goes back to the server.
		c.pmu.Lock()
		for k, held := range c.pending {
			for _, n := range held {
				c.budget.Release(n)
			}
			delete(c.pending, k)
		}
		c.pmu.Unlock()
	})
	return nil
}

func (c *lineConn) SessionID() string { return "" }
