package relay

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"
)

// A relay says Ready, then carries bytes both ways until the far end is
// done; a port nothing listens on is an error and no Ready.
func TestServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c) // until the relay passes on stdin's end
		c.Write(append([]byte("got "), b...))
	}()
	var out bytes.Buffer
	if err := Serve(context.Background(), ln.Addr().String(), strings.NewReader("ping"), &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != string(Ready)+"got ping" {
		t.Fatalf("relayed %q", out.String())
	}

	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := closed.Addr().String()
	closed.Close()
	out.Reset()
	if err := Serve(context.Background(), addr, strings.NewReader(""), &out); err == nil || out.Len() != 0 {
		t.Fatalf("a closed port: %v, wrote %q", err, out.String())
	}
}
