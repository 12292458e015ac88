package gitread

import (
	"bytes"
	"fmt"
	"strconv"
	"time"
)

// Signature is a commit's author or committer line. Its JSON is what
// xmode prints for one (docs/change-requests.md).
type Signature struct {
	Name  string `json:"name"`
	Email string `json:"email"`
	// Raw is the line as git stored it after the name: "<email> <unix> <tz>",
	// kept so a commit re-created elsewhere gets the same bytes.
	Raw  string `json:"-"`
	When string `json:"when"` // RFC 3339
}

// Commit is the part of a commit object xmode uses. Its JSON is what
// xmode prints for one (docs/change-requests.md).
type Commit struct {
	ID        Hash      `json:"id"`
	Tree      Hash      `json:"tree"`
	Parents   []Hash    `json:"parents"`
	Author    Signature `json:"author"`
	Committer Signature `json:"committer"`
	Message   string    `json:"message"`
	// Extra is true when the commit carries headers xmode does not re-create
	// (a signature, an encoding): an exported copy gets another ID.
	Extra bool `json:"-"`
}

// ParseCommit decodes the headers and message of commit object id: one
// tree, any parents, author and committer; any other header sets Extra.
func ParseCommit(id Hash, data []byte) (*Commit, error) {
	c := &Commit{ID: id}
	headers, msg, ok := bytes.Cut(data, []byte("\n\n"))
	if !ok {
		headers, msg = bytes.TrimSuffix(data, []byte("\n")), nil
	}
	c.Message = string(msg)
	seenTree := false
	for _, line := range bytes.Split(headers, []byte("\n")) {
		key, val, _ := bytes.Cut(line, []byte(" "))
		switch string(key) {
		case "tree":
			h, err := ParseHash(string(val))
			if err != nil || seenTree {
				return nil, fmt.Errorf("commit %s: bad tree header", id)
			}
			c.Tree, seenTree = h, true
		case "parent":
			h, err := ParseHash(string(val))
			if err != nil {
				return nil, fmt.Errorf("commit %s: bad parent header", id)
			}
			c.Parents = append(c.Parents, h)
		case "author":
			c.Author = parseSignature(string(val))
		case "committer":
			c.Committer = parseSignature(string(val))
		default:
			c.Extra = true
		}
	}
	if !seenTree {
		return nil, fmt.Errorf("commit %s has no tree", id)
	}
	return c, nil
}

// parseSignature splits "Name <email> 1700000000 +0100".
func parseSignature(s string) Signature {
	var sig Signature
	lt := bytes.IndexByte([]byte(s), '<')
	gt := bytes.LastIndexByte([]byte(s), '>')
	if lt < 0 || gt < lt {
		sig.Name = s
		return sig
	}
	sig.Name = string(bytes.TrimSpace([]byte(s[:lt])))
	sig.Email = s[lt+1 : gt]
	sig.Raw = s[lt:]
	sig.When = parseGitTime(s[gt+1:])
	return sig
}

// parseGitTime turns " 1700000000 +0100" into RFC 3339 in that zone; ""
// when it does not parse.
func parseGitTime(s string) string {
	f := bytes.Fields([]byte(s))
	if len(f) != 2 || len(f[1]) != 5 {
		return ""
	}
	sec, err1 := strconv.ParseInt(string(f[0]), 10, 64)
	hh, err2 := strconv.Atoi(string(f[1][1:3]))
	mm, err3 := strconv.Atoi(string(f[1][3:5]))
	if err1 != nil || err2 != nil || err3 != nil {
		return ""
	}
	off := hh*3600 + mm*60
	if f[1][0] == '-' {
		off = -off
	}
	return time.Unix(sec, 0).In(time.FixedZone("", off)).Format(time.RFC3339)
}
