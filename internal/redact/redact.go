// Package redact keeps secret values out of what xmode records and shows:
// a streaming writer that masks them in a step's output (as CI systems mask
// secrets in job logs), and the rule that decides which --env values are
// secret by their name.
package redact

import (
	"bytes"
	"io"
	"sort"
	"strings"
)

// Mask is what a secret value is replaced with.
const Mask = "***"

// MinLen is the shortest value masked in output: masking every "a" or "12"
// would garble the log, and a value that short protects nothing. Such a
// value is still recorded as *** wherever xmode records the variable.
const MinLen = 4

// SecretName reports whether a variable's name says its value is a secret
// (docs/agents.md, "Secrets"): it ends in _KEY, _TOKEN, _SECRET or PASSWORD.
func SecretName(name string) bool {
	n := strings.ToUpper(name)
	for _, s := range []string{"_KEY", "_TOKEN", "_SECRET", "PASSWORD"} {
		if strings.HasSuffix(n, s) {
			return true
		}
	}
	return false
}

// Set is a set of secret values.
type Set struct {
	values [][]byte  // longest first
	first  [256]bool // the first bytes of the values
}

// NewSet keeps the values of at least MinLen bytes.
func NewSet(values ...string) *Set {
	s := &Set{}
	s.Add(values...)
	return s
}

// Add adds values (shorter than MinLen ones are ignored).
func (s *Set) Add(values ...string) {
	for _, v := range values {
		if len(v) < MinLen {
			continue
		}
		dup := false
		for _, have := range s.values {
			dup = dup || string(have) == v
		}
		if !dup {
			s.values = append(s.values, []byte(v))
			s.first[v[0]] = true
		}
	}
	sort.Slice(s.values, func(i, j int) bool { return len(s.values[i]) > len(s.values[j]) })
}

// Empty reports whether there is nothing to mask.
func (s *Set) Empty() bool { return s == nil || len(s.values) == 0 }

// String masks every value in str.
func (s *Set) String(str string) string {
	if s.Empty() {
		return str
	}
	return string(s.replace([]byte(str)))
}

// Strings masks every value in each element (a new slice).
func (s *Set) Strings(ss []string) []string {
	if s.Empty() || ss == nil {
		return ss
	}
	out := make([]string, len(ss))
	for i, v := range ss {
		out[i] = s.String(v)
	}
	return out
}

func (s *Set) replace(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); {
		j := s.skip(b[i:])
		out = append(out, b[i:i+j]...)
		if i += j; i >= len(b) {
			break
		}
		if v := s.matchAt(b[i:]); v > 0 {
			out = append(out, Mask...)
			i += v
			continue
		}
		out = append(out, b[i])
		i++
	}
	return out
}

// skip is how many bytes of b cannot start a value.
func (s *Set) skip(b []byte) int {
	for i, c := range b {
		if s.first[c] {
			return i
		}
	}
	return len(b)
}

// matchAt is the length of the longest value b starts with, 0 if none.
func (s *Set) matchAt(b []byte) int {
	for _, v := range s.values {
		if bytes.HasPrefix(b, v) {
			return len(v)
		}
	}
	return 0
}

// partialAt reports whether b (the end of the data seen so far) is a proper
// prefix of some value: the rest may come in the next write.
func (s *Set) partialAt(b []byte) bool {
	for _, v := range s.values {
		if len(b) < len(v) && bytes.HasPrefix(v, b) {
			return true
		}
	}
	return false
}

// Writer masks the values of a Set in a stream. A value split across two
// writes is masked too: the end of a write that could be the start of a
// value is held back until the next write (or Close) tells. Write never
// fails; the writer behind it decides what a failure costs.
type Writer struct {
	w       io.Writer
	set     *Set
	pending []byte
}

// NewWriter masks set's values in what is written to w. With nothing to
// mask it returns w itself.
func NewWriter(w io.Writer, set *Set) io.Writer {
	if set.Empty() {
		return w
	}
	return &Writer{w: w, set: set}
}

func (m *Writer) Write(p []byte) (int, error) {
	buf := append(m.pending, p...)
	var out []byte
	i := 0
	for i < len(buf) {
		j := m.set.skip(buf[i:])
		out = append(out, buf[i:i+j]...)
		if i += j; i >= len(buf) {
			break
		}
		if v := m.set.matchAt(buf[i:]); v > 0 {
			out = append(out, Mask...)
			i += v
			continue
		}
		if m.set.partialAt(buf[i:]) {
			break
		}
		out = append(out, buf[i])
		i++
	}
	m.pending = append([]byte(nil), buf[i:]...)
	if len(out) > 0 {
		_, _ = m.w.Write(out)
	}
	return len(p), nil
}

// Close writes what was held back: at the end of the stream it cannot be
// the start of a value any more.
func (m *Writer) Close() error {
	if len(m.pending) > 0 {
		_, _ = m.w.Write(m.pending)
		m.pending = nil
	}
	return nil
}

// Flush closes w if it is a masking Writer.
func Flush(w io.Writer) {
	if m, ok := w.(*Writer); ok {
		_ = m.Close()
	}
}
