package dockerapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// encode is the filters query parameter: {"key": {"value": true}}, the
// form every daemon since API 1.22 reads.
func (f Filters) encode() (string, error) {
	m := make(map[string]map[string]bool, len(f))
	for k, vs := range f {
		set := make(map[string]bool, len(vs))
		for _, v := range vs {
			set[v] = true
		}
		m[k] = set
	}
	b, err := json.Marshal(m)
	return string(b), err
}

func (f Filters) query(q url.Values) (url.Values, error) {
	if len(f) == 0 {
		return q, nil
	}
	s, err := f.encode()
	if err != nil {
		return nil, err
	}
	if q == nil {
		q = url.Values{}
	}
	q.Set("filters", s)
	return q, nil
}

// ContainerCreate creates a container named name ("" lets the daemon pick
// one). The daemon's warnings come back in the answer.
func (c *Client) ContainerCreate(ctx context.Context, name string, cfg *ContainerConfig, hc *HostConfig) (CreateResponse, error) {
	var out CreateResponse
	if cfg == nil {
		return out, errors.New("container create: no configuration")
	}
	if hc != nil {
		for _, m := range hc.Mounts {
			if m.VolumeOptions != nil && m.VolumeOptions.Subpath != "" {
				// An older daemon ignores the field it does not know and
				// would mount the whole volume: refuse instead.
				ok, err := c.versionAtLeast(ctx, "1.45")
				if err != nil {
					return out, err
				}
				if !ok {
					return out, errors.New("volume subpath mounts need Engine API 1.45, the daemon speaks " + c.Version())
				}
			}
		}
	}
	q := url.Values{}
	if name != "" {
		q.Set("name", name)
	}
	body := struct {
		*ContainerConfig
		HostConfig *HostConfig `json:"HostConfig,omitempty"`
	}{cfg, hc}
	err := c.call(ctx, http.MethodPost, "/containers/create", q, body, &out)
	return out, err
}

// ContainerStart starts a container; one already running is success.
func (c *Client) ContainerStart(ctx context.Context, id string) error {
	id, err := segment("container", id, false)
	if err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, "/containers/"+id+"/start", nil, nil, nil)
}

// ContainerInspect returns what the daemon knows about a container (by id
// or name).
func (c *Client) ContainerInspect(ctx context.Context, id string) (ContainerJSON, error) {
	var out ContainerJSON
	id, err := segment("container", id, false)
	if err != nil {
		return out, err
	}
	err = c.call(ctx, http.MethodGet, "/containers/"+id+"/json", nil, nil, &out)
	if err == nil && (out.State == nil || out.Config == nil) {
		// Every daemon sends both; code reading them must not panic.
		if out.State == nil {
			out.State = &ContainerState{}
		}
		if out.Config == nil {
			out.Config = &ContainerConfig{}
		}
	}
	return out, err
}

// RemoveOptions are the options of a container removal.
type RemoveOptions struct {
	Force         bool // kill it first when it runs
	RemoveVolumes bool // with its anonymous volumes
}

// ContainerRemove removes a container.
func (c *Client) ContainerRemove(ctx context.Context, id string, opts RemoveOptions) error {
	id, err := segment("container", id, false)
	if err != nil {
		return err
	}
	q := url.Values{}
	if opts.Force {
		q.Set("force", "1")
	}
	if opts.RemoveVolumes {
		q.Set("v", "1")
	}
	return c.call(ctx, http.MethodDelete, "/containers/"+id, q, nil, nil)
}

// StopOptions say how a container is stopped when it is restarted.
type StopOptions struct {
	// Signal to send first instead of the container's stop signal. API
	// 1.42+; older daemons send their default (SIGTERM) and ignore it.
	Signal string
	// Timeout is how many seconds to wait before SIGKILL; nil: the
	// daemon's default.
	Timeout *int
}

func (c *Client) stopQuery(ctx context.Context, opts StopOptions) (url.Values, error) {
	q := url.Values{}
	if opts.Timeout != nil {
		q.Set("t", strconv.Itoa(*opts.Timeout))
	}
	if opts.Signal != "" {
		ok, err := c.versionAtLeast(ctx, "1.42")
		if err != nil {
			return nil, err
		}
		if ok {
			q.Set("signal", opts.Signal)
		}
	}
	return q, nil
}

// ContainerRestart stops a container (opts: the signal and how long to
// wait for it) and starts it again.
func (c *Client) ContainerRestart(ctx context.Context, id string, opts StopOptions) error {
	id, err := segment("container", id, false)
	if err != nil {
		return err
	}
	q, err := c.stopQuery(ctx, opts)
	if err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, "/containers/"+id+"/restart", q, nil, nil)
}

// ContainerTop lists the container's processes as ps on the daemon's host
// sees them, with psArgs as ps's arguments.
func (c *Client) ContainerTop(ctx context.Context, id string, psArgs []string) (TopResponse, error) {
	var out TopResponse
	id, err := segment("container", id, false)
	if err != nil {
		return out, err
	}
	q := url.Values{}
	if len(psArgs) > 0 {
		q.Set("ps_args", strings.Join(psArgs, " "))
	}
	err = c.call(ctx, http.MethodGet, "/containers/"+id+"/top", q, nil, &out)
	return out, err
}

// ContainerList lists containers matching the filters; all includes those
// not running.
func (c *Client) ContainerList(ctx context.Context, all bool, f Filters) ([]ContainerSummary, error) {
	q := url.Values{}
	if all {
		q.Set("all", "1")
	}
	q, err := f.query(q)
	if err != nil {
		return nil, err
	}
	var out []ContainerSummary
	err = c.call(ctx, http.MethodGet, "/containers/json", q, nil, &out)
	return out, err
}
