package redact

import (
	"bytes"
	"strings"
	"testing"
)

func TestWriterMasksValuesSplitAcrossWrites(t *testing.T) {
	set := NewSet("sk-SECRETVALUE", "hunter22", "ab") // "ab" is too short to mask
	text := "key=sk-SECRETVALUE pw=hunter22 sk-SECRET (not the value) ab hunter2 end sk-SECRETVALUEsk-SECRETVALUE"
	want := "key=*** pw=*** sk-SECRET (not the value) ab hunter2 end ******"
	// Every way of cutting the stream into two writes, and byte by byte.
	for cut := 0; cut <= len(text); cut++ {
		var out bytes.Buffer
		w := NewWriter(&out, set)
		w.Write([]byte(text[:cut]))
		w.Write([]byte(text[cut:]))
		Flush(w)
		if out.String() != want {
			t.Fatalf("cut at %d: got %q, want %q", cut, out.String(), want)
		}
	}
	var out bytes.Buffer
	w := NewWriter(&out, set)
	for i := range len(text) {
		w.Write([]byte{text[i]})
	}
	Flush(w)
	if out.String() != want {
		t.Fatalf("byte by byte: got %q", out.String())
	}
	if got := set.String(text); got != want {
		t.Fatalf("String: got %q", got)
	}
}

func TestWriterHoldsBackOnlyAPossibleStart(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out, NewSet("topsecret"))
	w.Write([]byte("line one\ntop"))
	if out.String() != "line one\n" {
		t.Fatalf("before the rest arrived: %q", out.String())
	}
	w.Write([]byte("ping\n"))
	if out.String() != "line one\ntopping\n" {
		t.Fatalf("after: %q", out.String())
	}
	w.Write([]byte("tops"))
	Flush(w)
	if !strings.HasSuffix(out.String(), "tops") {
		t.Fatalf("Close must write what was held back: %q", out.String())
	}
}

func TestNothingToMaskIsThePlainWriter(t *testing.T) {
	var out bytes.Buffer
	if NewWriter(&out, NewSet("abc")) != &out {
		t.Fatal("a set with only short values must not wrap the writer")
	}
}

func TestSecretName(t *testing.T) {
	for name, want := range map[string]bool{
		"OPENAI_API_KEY": true, "GH_TOKEN": true, "AWS_SECRET": true, "DB_PASSWORD": true, "PASSWORD": true,
		"db_password": true, "KEYS": false, "TOKENIZER": false, "PATH": false, "KEY": false, "MONKEY": false,
	} {
		if SecretName(name) != want {
			t.Errorf("SecretName(%q) = %v, want %v", name, !want, want)
		}
	}
}
