package ui

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/internal/humanize"
	"github.com/xmode/xmode/pool"
	"github.com/xmode/xmode/store"
)

const sessionsPerPage = 200

type sessionsData struct {
	Sessions []*store.Session
	All      bool
	User     string
	More     int
	Now      time.Time
}

// sessionsPage: open sessions (with ?all=1 ended ones too), by user.
func (s *Server) sessionsPage(r *http.Request) (*view, error) {
	q := r.URL.Query()
	d := &sessionsData{All: q.Get("all") == "1", User: q.Get("user"), Now: s.now()}
	list, err := s.o.Svc.Store.List(r.Context(), store.Filter{All: d.All, User: d.User})
	if err != nil {
		return nil, err
	}
	if len(list) > sessionsPerPage {
		d.More = len(list) - sessionsPerPage
		list = list[:sessionsPerPage]
	}
	d.Sessions = list
	return &view{tmpl: "sessions.html", title: "Sessions", nav: "sessions", data: d}, nil
}

// loadSession is the session a URL names: an exact, well-formed ID.
func (s *Server) loadSession(r *http.Request) (*store.Session, error) {
	id := r.PathValue("session")
	if !fsguard.ValidID("sbx_", id) {
		return nil, fail.NotFoundf("no such session: IDs look like sbx_7k2m9q4x")
	}
	return s.o.Svc.Store.Get(r.Context(), id)
}

type sessionData struct {
	S        *store.Session
	Steps    []*stepView
	Open     bool
	Expired  bool
	Left     string
	Cloud    bool
	Done     string
	MaxTTL   string
	TTLValue string
	// Ports are its published ports, each opened through the UI.
	Ports []store.Port
	// PortsRemote: the UI listens beyond loopback, where ports do not open.
	PortsRemote bool
}

// sessionPage: one session, its steps, and stop and extend.
func (s *Server) sessionPage(r *http.Request) (*view, error) {
	sess, err := s.loadSession(r)
	if err != nil {
		return nil, err
	}
	now := s.now()
	d := &sessionData{S: sess, Done: doneMessage(r.URL.Query().Get("done")), TTLValue: "1h"}
	d.Open = sess.Status == store.StatusOpen
	d.Expired = d.Open && sess.Expired(now)
	if d.Open && !d.Expired {
		d.Left = humanize.Span(sess.ExpiresAt.Sub(now))
	}
	if s.o.Svc.Cfg.MaxTTL > 0 {
		d.MaxTTL = s.o.Svc.Cfg.MaxTTL.String()
	}
	if _, err := s.o.Svc.Store.CloudTaskOf(r.Context(), sess.ID); err == nil {
		d.Cloud = true
	}
	if d.Open {
		if d.Ports, err = s.o.Svc.Store.Ports(r.Context(), sess.ID, false); err != nil {
			return nil, err
		}
		d.PortsRemote = s.o.Remote
	}
	rows, err := s.o.Svc.Store.Steps(r.Context(), sess.RunID)
	if err != nil {
		return nil, err
	}
	for _, row := range rows {
		if row.SessionID == sess.ID {
			d.Steps = append(d.Steps, s.stepView(row, now))
		}
	}
	return &view{tmpl: "session.html", title: "Session " + sess.ID, nav: "sessions", data: d}, nil
}

// stopSession stops a session as `sandbox stop [--force]` does.
func (s *Server) stopSession(r *http.Request) (*view, error) {
	sess, err := s.loadSession(r)
	if err != nil {
		return nil, err
	}
	if _, err := s.o.Svc.Stop(context.WithoutCancel(r.Context()), sess, r.PostForm.Get("force") == "1"); err != nil {
		return nil, err
	}
	return &view{redirect: "/sessions/" + sess.ID + "?done=stopped"}, nil
}

// extendSession pushes a session's expiry as `sandbox extend --ttl` does.
func (s *Server) extendSession(r *http.Request) (*view, error) {
	sess, err := s.loadSession(r)
	if err != nil {
		return nil, err
	}
	d, err := config.ParseDuration(r.PostForm.Get("ttl"))
	if err != nil {
		return nil, fail.Usagef("ttl: %v", err)
	}
	if _, err := s.o.Svc.Extend(context.WithoutCancel(r.Context()), sess, d); err != nil {
		return nil, err
	}
	return &view{redirect: "/sessions/" + sess.ID + "?done=extended"}, nil
}

// machinesPage: the project machines and their pools.
func (s *Server) machinesPage(r *http.Request) (*view, error) {
	views, err := s.o.Svc.Pools().Views(r.Context(), "")
	if err != nil {
		return nil, err
	}
	return &view{tmpl: "machines.html", title: "Project machines", nav: "machines", data: views}, nil
}

// machinePage: one project machine and its pool.
func (s *Server) machinePage(r *http.Request) (*view, error) {
	project := r.PathValue("project")
	if !fsguard.ValidProject(project) {
		return nil, fail.NotFoundf("no such project machine")
	}
	views, err := s.o.Svc.Pools().Views(r.Context(), project)
	if err != nil {
		return nil, err
	}
	return &view{tmpl: "machine.html", title: "Machine " + project, nav: "machines", data: &machineData{views[0], s.now()}}, nil
}

type machineData struct {
	pool.MachineView
	Now time.Time
}

const cloudTasksShown = 200

// cloudPage: the Codex cloud tasks, newest first.
func (s *Server) cloudPage(r *http.Request) (*view, error) {
	tasks, err := s.o.Svc.Store.CloudTasks(r.Context(), cloudTasksShown)
	if err != nil {
		return nil, err
	}
	return &view{tmpl: "cloud.html", title: "Cloud tasks", nav: "cloud", data: tasks}, nil
}

const threadPage = 500

type cloudTaskData struct {
	T       *store.CloudTask
	Lines   []store.ThreadLine
	From    int
	Next    int
	HasNext bool
	Prev    int
	HasPrev bool
}

// cloudTaskPage: a session's cloud task and its transcript, a page at a time.
func (s *Server) cloudTaskPage(r *http.Request) (*view, error) {
	sess, err := s.loadSession(r)
	if err != nil {
		return nil, err
	}
	t, err := s.o.Svc.Store.CloudTaskOf(r.Context(), sess.ID)
	if err != nil {
		return nil, err
	}
	d := &cloudTaskData{T: t}
	if f := r.URL.Query().Get("from"); f != "" {
		if d.From, err = strconv.Atoi(f); err != nil || d.From < 0 {
			return nil, fail.Usagef("from=%q is not a line's number", f)
		}
	}
	lines, err := s.o.Svc.Store.ThreadPage(r.Context(), t.TaskID, d.From, threadPage+1)
	if err != nil {
		return nil, err
	}
	if len(lines) > threadPage {
		lines, d.HasNext, d.Next = lines[:threadPage], true, lines[threadPage].Index
	}
	d.Lines = lines
	d.Prev, d.HasPrev = max(0, d.From-threadPage), d.From > 0
	return &view{tmpl: "cloudtask.html", title: "Cloud task " + t.TaskID, nav: "cloud", data: d}, nil
}
