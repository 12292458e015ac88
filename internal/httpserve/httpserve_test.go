package httpserve

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xmode/xmode/fail"
)

// serve starts h on a loopback port with o and returns its address.
func serve(t *testing.T, h http.Handler, o Options) string {
	t.Helper()
	ln, err := Listen("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, h, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// closedWithin reports whether the server closes c within d: a read sees
// the end of the connection (or a reset), not the client's own deadline.
func closedWithin(t *testing.T, c net.Conn, d time.Duration) (bool, time.Duration) {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false, time.Since(start)
	}
	return true, time.Since(start)
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A client that connects and sends nothing, or sends its headers a byte
// at a time, or its body too slowly, is dropped at the deadline: a
// connection without a request costs the server a descriptor for
// ReadHeaderTimeout at most.
func TestSlowClientsAreDropped(t *testing.T) {
	o := Options{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 600 * time.Millisecond}
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		fmt.Fprintln(w, "ok")
	}), o)

	silent := dial(t, addr)
	if closed, after := closedWithin(t, silent, 5*time.Second); !closed {
		t.Errorf("a silent client is still connected after %v", after)
	}

	loris := dial(t, addr)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		io.WriteString(loris, "GET / HTTP/1.1\r\nHost: x\r\n")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := io.WriteString(loris, "X"); err != nil {
				return
			}
		}
	}()
	if closed, after := closedWithin(t, loris, 5*time.Second); !closed {
		t.Errorf("a slow-loris client (a header byte every 50 ms) is still connected after %v", after)
	}

	body := dial(t, addr)
	go func() {
		io.WriteString(body, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
		for range 100 {
			time.Sleep(50 * time.Millisecond)
			if _, err := io.WriteString(body, "x"); err != nil {
				return
			}
		}
	}()
	if closed, after := closedWithin(t, body, 5*time.Second); !closed {
		t.Errorf("a client sending its body a byte every 50 ms is still connected after %v", after)
	}
}

// A response that streams for longer than every read deadline goes on as
// long as the client reads it; one whose client stops reading is ended by
// the write deadline, and its handler learns it.
func TestStreamsOutliveTheReadDeadlines(t *testing.T) {
	o := Options{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: 300 * time.Millisecond,
		IdleTimeout: 300 * time.Millisecond, WriteTimeout: 500 * time.Millisecond}
	stalled := make(chan error, 1)
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		if r.URL.Path == "/flood" {
			big := []byte(strings.Repeat("x", 64<<10))
			for {
				if _, err := w.Write(big); err != nil {
					stalled <- err
					return
				}
			}
		}
		for i := range 12 { // 1.2 s: four times ReadTimeout
			if _, err := fmt.Fprintf(w, "data: %d\n\n", i); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}), o)

	// A GET (net/http watches the connection from the start) and a POST
	// whose body the handler reads (from then on).
	for _, post := range []bool{false, true} {
		var resp *http.Response
		var err error
		if post {
			resp, err = http.Post("http://"+addr+"/stream", "text/plain", strings.NewReader("a body, read at once"))
		} else {
			resp, err = http.Get("http://" + addr + "/stream")
		}
		if err != nil {
			t.Fatal(err)
		}
		var events int
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") {
				events++
			}
		}
		resp.Body.Close()
		if events != 12 {
			t.Errorf("POST %v: the stream was cut after %d of 12 events (%v)", post, events, sc.Err())
		}
	}

	c := dial(t, addr)
	io.WriteString(c, "GET /flood HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case err := <-stalled:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("the write to a client that stopped reading failed with %v, want its deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("a write to a client that stopped reading never failed")
	}
}

// The cap holds: with MaxConns connections open, the next ones wait (the
// kernel accepted them; the server did not), and one is served as soon as
// another ends.
func TestConnectionCap(t *testing.T) {
	const max, more = 3, 2
	var in atomic.Int32
	release := make(chan struct{})
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.Add(1)
		select {
		case <-release:
		case <-r.Context().Done(): // its client went away
		}
	}), Options{MaxConns: max})
	defer close(release)
	var conns []net.Conn
	for range max + more {
		c := dial(t, addr)
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	deadline := time.Now().Add(10 * time.Second)
	for in.Load() < max && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // time for a request over the cap to arrive, if it could
	if got := in.Load(); got != max {
		t.Fatalf("%d requests of %d connections in the handler at once; want the cap, %d", got, max+more, max)
	}
	conns[0].Close()
	for in.Load() < max+1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := in.Load(); got != max+1 {
		t.Errorf("after a connection closed, %d requests were served; want %d", got, max+1)
	}
}

// A refusal closes its connection.
func TestRefuseCloses(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Refuse(w, http.StatusUnauthorized, "no token")
	}), Options{})
	c := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 401 || !resp.Close || string(b) != "no token\n" {
		t.Errorf("refused: %d close=%v %q", resp.StatusCode, resp.Close, b)
	}
	if closed, _ := closedWithin(t, c, 5*time.Second); !closed {
		t.Error("the connection stayed open after the refusal")
	}
}

// The listen policy: a host and a port; loopback unless allowRemote; an
// empty host (every interface) never, even with allowRemote.
func TestCheckListen(t *testing.T) {
	for _, c := range []struct {
		addr   string
		remote bool
		want   string // "" accepted; else in the usage error
	}{
		{"127.0.0.1:0", false, ""},
		{"127.0.0.1:8765", true, ""},
		{"[::1]:8765", false, ""},
		{"localhost:8765", false, ""},
		{"0.0.0.0:8765", false, "reachable from other machines"},
		{"0.0.0.0:8765", true, ""},
		{"192.0.2.1:80", false, "add --allow-remote"},
		{":8765", false, "listens on every interface"},
		{":8765", true, "listens on every interface"},
		{"127.0.0.1", false, "give HOST:PORT"},
		{"127.0.0.1:", false, "give HOST:PORT"},
		{"nonsense", true, "give HOST:PORT"},
	} {
		err := CheckListen(c.addr, c.remote)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("CheckListen(%q, %v): %v", c.addr, c.remote, err)
		case c.want != "" && (err == nil || fail.KindOf(err) != fail.Usage || !strings.Contains(err.Error(), c.want)):
			t.Errorf("CheckListen(%q, %v): %v; want a usage error saying %q", c.addr, c.remote, err, c.want)
		}
	}
}

// A handler that keeps a request waiting before it reads the body (MCP's
// budget) gives the body the whole ReadTimeout from then on: the wait
// does not cost the client its request; without ReadFromNow it would.
func TestReadFromNow(t *testing.T) {
	o := Options{ReadTimeout: time.Second}
	read := make(chan error, 2)
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(1500 * time.Millisecond) // waiting its turn
		if r.URL.Path == "/resumed" {
			ReadFromNow(r)
		}
		_, err := io.Copy(io.Discard, r.Body)
		read <- err
	}), o)
	for _, path := range []string{"/resumed", "/waited"} {
		pr, pw := io.Pipe()
		go func() {
			pw.Write([]byte("first"))
			time.Sleep(1700 * time.Millisecond) // the rest once the handler reads
			pw.Write([]byte("rest"))
			pw.Close()
		}()
		resp, err := http.Post("http://"+addr+path, "text/plain", pr)
		if err == nil {
			resp.Body.Close()
		}
		err = <-read
		if path == "/resumed" && err != nil {
			t.Errorf("the body of a request that waited its turn: %v", err)
		}
		if path == "/waited" && err == nil {
			t.Errorf("without ReadFromNow the wait counted against the body's time, and should have cut it")
		}
	}
}
