package egress

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/net/http/httpguts"
)

// Credential is a header the proxy sets on requests to one host, from a
// secret the sandbox never sees: the sandbox gets Placeholder in the
// variable instead, and the proxy puts the secret where the placeholder
// stands in that header (or adds the header) on that host's requests only.
type Credential struct {
	Host        string // a host name, exactly
	Header      string // canonical form, e.g. X-Api-Key
	Env         string // the proxy's environment variable holding the secret, or
	File        string // an absolute path to a file holding it
	Placeholder string // what the sandbox gets instead
	Source      string
}

// ParseCredential reads host=header:VARIABLE or host=header:/path/to/file
// (--credential api.anthropic.com=x-api-key:ANTHROPIC_API_KEY).
func ParseCredential(spec, source string) (Credential, error) {
	bad := func(problem string) (Credential, error) {
		return Credential{}, &RuleError{Rule: spec, Source: source, Problem: problem,
			Example: "api.anthropic.com=x-api-key:ANTHROPIC_API_KEY or api.example.com=authorization:/run/secrets/example"}
	}
	host, rest, ok := strings.Cut(strings.TrimSpace(spec), "=")
	if !ok {
		return bad("a credential is host=header:VARIABLE")
	}
	name, ok := canonicalName(host)
	if !ok || strings.Contains(host, "*") {
		return bad(fmt.Sprintf("%q is not a host name (one host exactly: no wildcard, no address)", host))
	}
	header, from, ok := strings.Cut(rest, ":")
	if !ok || from == "" {
		return bad("the header needs :VARIABLE or :/path after it")
	}
	if !httpguts.ValidHeaderFieldName(header) {
		return bad(fmt.Sprintf("%q is not a header name", header))
	}
	if framingHeaders[strings.ToLower(header)] {
		return bad(fmt.Sprintf("%s is not a header a credential may set", header))
	}
	c := Credential{Host: name, Header: textproto.CanonicalMIMEHeaderKey(header), Source: source}
	switch {
	case filepath.IsAbs(from):
		c.File = filepath.Clean(from)
	case validEnvName(from):
		c.Env = from
	default:
		return bad(fmt.Sprintf("%q is neither a variable name nor an absolute path", from))
	}
	return c, nil
}

// framingHeaders say how a request is routed or framed: never a credential.
var framingHeaders = map[string]bool{"host": true, "connection": true, "content-length": true, "transfer-encoding": true,
	"te": true, "trailer": true, "upgrade": true, "keep-alive": true, "proxy-authorization": true,
	"proxy-authenticate": true, "proxy-connection": true}

func validEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// NewPlaceholder is a fresh value for the sandbox's copy of a secret
// variable: random, so the proxy never mistakes another string for it.
func NewPlaceholder() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return "xmode-placeholder-" + hex.EncodeToString(b[:])
}

// From names where the secret comes from, never the secret.
func (c Credential) From() string {
	if c.File != "" {
		return c.File
	}
	return c.Env
}

// maxSecret bounds a secret file: a key, not a document.
const maxSecret = 64 << 10

// Secret reads the secret: the variable from getenv, or the file (a
// regular file, not followed through a final link, at most 64 KiB, one
// trailing newline dropped). It must be a valid header value.
func (c Credential) Secret(getenv func(string) string) (string, error) {
	var v string
	if c.File != "" {
		f, err := os.OpenFile(c.File, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			return "", fmt.Errorf("credential for %s: %w", c.Host, err)
		}
		defer f.Close()
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			return "", fmt.Errorf("credential for %s: %s is not a regular file", c.Host, c.File)
		}
		b, err := io.ReadAll(io.LimitReader(f, maxSecret+1))
		if err != nil {
			return "", fmt.Errorf("credential for %s: %w", c.Host, err)
		}
		if len(b) > maxSecret {
			return "", fmt.Errorf("credential for %s: %s is larger than 64 KiB", c.Host, c.File)
		}
		v = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	} else {
		v = getenv(c.Env)
	}
	if v == "" {
		return "", fmt.Errorf("credential for %s: %s is empty or unset", c.Host, c.From())
	}
	if !httpguts.ValidHeaderFieldValue(v) {
		return "", fmt.Errorf("credential for %s: the value of %s cannot be sent in a header (a line break or a control character)", c.Host, c.From())
	}
	return v, nil
}

type credentialJSON struct {
	Host        string `json:"host"`
	Header      string `json:"header"`
	Env         string `json:"env,omitempty"`
	File        string `json:"file,omitempty"`
	Placeholder string `json:"placeholder"`
	Source      string `json:"source,omitempty"`
}

func (c Credential) file() credentialJSON {
	return credentialJSON{c.Host, c.Header, c.Env, c.File, c.Placeholder, c.Source}
}

func (j credentialJSON) credential() (Credential, error) {
	from := j.Env
	if j.File != "" {
		from = j.File
	}
	c, err := ParseCredential(j.Host+"="+j.Header+":"+from, j.Source)
	if err != nil {
		return Credential{}, err
	}
	if (j.Env == "") == (j.File == "") {
		return Credential{}, fmt.Errorf("credential for %s: give env or file, one of them", j.Host)
	}
	if len(j.Placeholder) < 16 || !httpguts.ValidHeaderFieldValue(j.Placeholder) {
		return Credential{}, fmt.Errorf("credential for %s: a placeholder of 16 characters or more is needed", j.Host)
	}
	c.Placeholder = j.Placeholder
	return c, nil
}
