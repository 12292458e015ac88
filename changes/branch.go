package changes

import (
	"strings"

	"github.com/xmode/xmode/fail"
)

// CheckBranch refuses a name `cr export` must not create as a branch, as
// `git check-ref-format --branch` does — refs/heads/NAME must be a valid
// ref, NAME not HEAD nor starting with '-' — and, beyond git, a name git
// would read as another (@, @{-1}) or nest (refs/heads/x would become
// refs/heads/refs/heads/x). The error says which rule the name breaks.
func CheckBranch(name string) error {
	bad := func(why string) error {
		return fail.Usagef("%s %q is not a valid branch name: %s", fail.Branch, name, why)
	}
	switch {
	case name == "":
		return bad("it is empty")
	case strings.HasPrefix(name, "-"):
		return fail.Usagef("%s %q: a branch cannot start with '-'", fail.Branch, name)
	case name == "HEAD":
		return bad("HEAD is git's name for the checked-out commit")
	case name == "@":
		return bad("git reads @ as HEAD")
	case strings.HasPrefix(name, "refs/heads/"):
		return bad("give it without refs/heads/ (" + strings.TrimPrefix(name, "refs/heads/") + ")")
	case strings.HasPrefix(name, "refs/"):
		return bad("it would be created as refs/heads/" + name + ": give a name without refs/")
	}
	if why := refnameRefuses("refs/heads/" + name); why != "" {
		return bad(why)
	}
	return nil
}

// refnameRefuses says why git's check_refname_format (refs.c) refuses the
// full ref name ref, "" when it accepts it.
func refnameRefuses(ref string) string {
	if ref == "@" {
		return "a ref cannot be @"
	}
	for c := range strings.SplitSeq(ref, "/") {
		switch {
		case c == "":
			return "it has an empty part (a leading or trailing '/', or '//')"
		case c[0] == '.':
			return "a part starts with '.'"
		case strings.HasSuffix(c, ".lock"):
			return "a part ends with .lock"
		case strings.Contains(c, ".."):
			return "it contains '..'"
		case strings.Contains(c, "@{"):
			return "it contains '@{'"
		}
		for i := 0; i < len(c); i++ {
			switch b := c[i]; {
			case b < 0x20 || b == 0x7f:
				return "it contains a control character"
			case b == ' ':
				return "it contains a space"
			case strings.IndexByte(`~^:?*[\`, b) >= 0:
				return "it contains '" + string(b) + "'"
			}
		}
	}
	if strings.HasSuffix(ref, ".") {
		return "it ends with '.'"
	}
	return ""
}
