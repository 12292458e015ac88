package dockerapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
)

// ImageInspect returns an image of the daemon's store (by reference or
// id); an absent one is a not-found error.
func (c *Client) ImageInspect(ctx context.Context, ref string) (ImageInspect, error) {
	var out ImageInspect
	ref, err := segment("image", ref, true)
	if err != nil {
		return out, err
	}
	err = c.call(ctx, http.MethodGet, "/images/"+ref+"/json", nil, nil, &out)
	return out, err
}

// ImagePull asks the daemon to pull ref (POST /images/create) and returns
// its progress stream: JSON messages, one after the other, until the pull
// ended. A failed pull often still answers 200 and reports the error
// inside the stream: read it with DecodeStream, which returns it.
func (c *Client) ImagePull(ctx context.Context, ref string) (io.ReadCloser, error) {
	r, err := ParseReference(ref)
	if err != nil {
		return nil, err
	}
	tag := r.Tag
	switch {
	case r.Digest != "":
		tag = r.Digest
	case tag == "":
		tag = "latest"
	}
	q := url.Values{"fromImage": {r.Name}, "tag": {tag}}
	resp, err := c.do(ctx, http.MethodPost, "/images/create", q, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// DecodeStream reads a JSON progress stream to its end, handing each
// message to fn. A message carrying an error ends it: that error is
// returned as *StreamError. A stream that breaks is an error too.
func DecodeStream(r io.Reader, fn func(JSONMessage)) error {
	dec := json.NewDecoder(r)
	for {
		var m JSONMessage
		if err := dec.Decode(&m); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if m.Error != "" || m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
			e := &StreamError{Message: m.Error}
			if m.ErrorDetail != nil {
				e.Code = m.ErrorDetail.Code
				if m.ErrorDetail.Message != "" {
					e.Message = m.ErrorDetail.Message
				}
			}
			return e
		}
		if fn != nil {
			fn(m)
		}
	}
}
