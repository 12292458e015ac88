package dockerapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// EventsOptions select the daemon's events. With Until zero the stream
// stays open (for new events) until ctx ends.
type EventsOptions struct {
	Since   time.Time // zero: from now on
	Until   time.Time
	Filters Filters // type, container, event, label, …
}

// timestamp is a time as the events API reads it: seconds.nanoseconds.
func timestamp(t time.Time) string {
	return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond())
}

// Events streams the daemon's events: the recorded ones since opts.Since
// in the daemon's order, then new ones as they happen. Events arrive on the
// first channel; the second receives one error when the stream ends (the
// daemon closed it, or it broke, or ctx ended) and is not closed.
func (c *Client) Events(ctx context.Context, opts EventsOptions) (<-chan Event, <-chan error) {
	msgs := make(chan Event)
	errs := make(chan error, 1)
	go func() {
		errs <- c.events(ctx, opts, msgs)
	}()
	return msgs, errs
}

func (c *Client) events(ctx context.Context, opts EventsOptions, msgs chan<- Event) error {
	q := url.Values{}
	if !opts.Since.IsZero() {
		q.Set("since", timestamp(opts.Since))
	}
	if !opts.Until.IsZero() {
		q.Set("until", timestamp(opts.Until))
	}
	q, err := opts.Filters.query(q)
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodGet, "/events", q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var ev Event
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err // io.EOF when the daemon ended the stream (Until)
		}
		select {
		case msgs <- ev:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
