package dockerapi

import (
	"context"
	"net/http"
	"net/url"
)

// VolumeCreate creates a named volume; creating one that exists with the
// same driver returns it.
func (c *Client) VolumeCreate(ctx context.Context, req VolumeCreateRequest) (Volume, error) {
	var out Volume
	err := c.call(ctx, http.MethodPost, "/volumes/create", nil, req, &out)
	return out, err
}

// VolumeInspect returns a volume.
func (c *Client) VolumeInspect(ctx context.Context, name string) (Volume, error) {
	var out Volume
	name, err := segment("volume", name, false)
	if err != nil {
		return out, err
	}
	err = c.call(ctx, http.MethodGet, "/volumes/"+name, nil, nil, &out)
	return out, err
}

// VolumeList lists the volumes matching the filters.
func (c *Client) VolumeList(ctx context.Context, f Filters) ([]Volume, error) {
	q, err := f.query(nil)
	if err != nil {
		return nil, err
	}
	var out struct {
		Volumes []*Volume `json:"Volumes"`
	}
	if err := c.call(ctx, http.MethodGet, "/volumes", q, nil, &out); err != nil {
		return nil, err
	}
	vs := make([]Volume, 0, len(out.Volumes))
	for _, v := range out.Volumes {
		if v != nil {
			vs = append(vs, *v)
		}
	}
	return vs, nil
}

// VolumeRemove removes a volume; force also removes one the daemon
// considers in use by a dead container.
func (c *Client) VolumeRemove(ctx context.Context, name string, force bool) error {
	name, err := segment("volume", name, false)
	if err != nil {
		return err
	}
	var q url.Values
	if force {
		q = url.Values{"force": {"1"}}
	}
	return c.call(ctx, http.MethodDelete, "/volumes/"+name, q, nil, nil)
}
