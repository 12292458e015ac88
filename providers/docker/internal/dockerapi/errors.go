package dockerapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// Error is the daemon's answer to a request it refused: the HTTP status and
// the daemon's message. Its text is the one the docker CLI and the SDK
// print ("Error response from daemon: …"), so messages stay familiar.
type Error struct {
	StatusCode int
	Message    string
	Method     string // what was asked, for debugging
	Path       string
}

func (e *Error) Error() string { return "Error response from daemon: " + e.Message }

// IsNotFound reports whether err is the daemon's 404: no such container,
// image, volume or exec.
func IsNotFound(err error) bool { return hasStatus(err, http.StatusNotFound) }

// IsConflict reports whether err is the daemon's 409: a name in use, a
// removal already in progress, a volume in use.
func IsConflict(err error) bool { return hasStatus(err, http.StatusConflict) }

func hasStatus(err error, code int) bool {
	var e *Error
	return errors.As(err, &e) && e.StatusCode == code
}

// ConnError is a failure to talk to the daemon at all: it could not be
// reached, or the connection broke before an answer came.
type ConnError struct {
	Host string
	Err  error
}

func (e *ConnError) Error() string {
	why := e.Err
	// net/http's "Get "http://api.moby.localhost/…": " says nothing more.
	var ue *url.Error
	if errors.As(why, &ue) {
		why = ue.Err
	}
	return fmt.Sprintf("cannot connect to the docker daemon at %s: %v", e.Host, why)
}

func (e *ConnError) Unwrap() error { return e.Err }

// IsConnectionFailed reports whether err is a *ConnError.
func IsConnectionFailed(err error) bool {
	var e *ConnError
	return errors.As(err, &e)
}

// VersionError is a daemon whose API is older than MinVersion.
type VersionError struct {
	Host   string
	Daemon string
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("the docker daemon at %s speaks Engine API %s; xmode needs API %s or newer (Docker Engine 1.12+)", e.Host, e.Daemon, MinVersion)
}

// StreamError is an error the daemon reported inside a JSON progress
// stream (an image pull), after it had already answered 200.
type StreamError struct {
	Code    int
	Message string
}

func (e *StreamError) Error() string { return e.Message }
