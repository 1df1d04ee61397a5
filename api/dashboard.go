package api

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// The dashboard: server-rendered pages (html/template) with their CSS and JS embedded, no
// CDN. The run page follows the run's SSE stream and redraws its steps as they move.
//
// Browsers cannot send a bearer header from EventSource, so when reads are not public a
// visit to a dashboard page with ?token=<read token> stores the token in an HttpOnly,
// SameSite=Strict cookie and redirects to the same page without it; the API accepts the
// cookie like a bearer header.

//go:embed web/*.html web/static
var webFS embed.FS

// pages holds the parsed templates.
type pages struct {
	index *template.Template
	run   *template.Template
}

var pageFuncs = template.FuncMap{
	"clock": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("15:04:05Z")
	},
	"took": func(start, end time.Time) string {
		switch {
		case start.IsZero():
			return ""
		case end.IsZero():
			return "running"
		}
		return humanDuration(end.Sub(start))
	},
	"wait": func(d time.Duration) string {
		if d == 0 {
			return ""
		}
		return humanDuration(d)
	},
	"short": func(s string) string {
		if len(s) > 12 {
			return s[:12]
		}
		return s
	},
	"detail": stepDetail,
}

func newPages() *pages {
	parse := func(name string) *template.Template {
		return template.Must(template.New(name).Funcs(pageFuncs).ParseFS(webFS, "web/layout.html", "web/"+name))
	}
	return &pages{index: parse("index.html"), run: parse("run.html")}
}

// humanDuration matches run.js's dur(): "850ms", "12.3s", "4m05s".
func humanDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	m := int64(d / time.Minute)
	sec := int64((d % time.Minute).Round(time.Second) / time.Second)
	return fmt.Sprintf("%dm%02ds", m, sec)
}

// stepDetail is the step's error, its note, or what it changed and deployed (names, never values).
func stepDetail(s runs.Step) string {
	if s.Error != "" {
		return s.Error
	}
	if s.Note != "" {
		return s.Note // e.g. a stale step: the newer build and run on the service
	}
	if s.Status == runs.StepWaitingLock && s.LockKey != "" {
		return "waiting for " + s.LockKey
	}
	var parts []string
	if c := s.Changes.String(); c != "" {
		parts = append(parts, c)
	}
	if s.DeploymentUUID != "" {
		parts = append(parts, "deployment "+s.DeploymentUUID)
	}
	return strings.Join(parts, "; ")
}

// render executes a page into a buffer first, so a template error answers 500 cleanly.
func (s *server) render(w http.ResponseWriter, r *http.Request, t *template.Template, data any) {
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", data); err != nil {
		s.writeError(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
}

type indexData struct {
	Title    string
	Runs     []runs.Run
	Locks    []locks.Info
	LocksErr string
}

// handleDashboard serves GET /: recent runs and the current locks.
func (s *server) handleDashboard() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		page, err := s.runs.List(r.Context(), runs.Filter{Limit: 30})
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		d := indexData{Title: "Dashboard", Runs: page.Runs}
		infos, err := s.locks.List(r.Context(), "")
		if err != nil {
			d.LocksErr = "the lock backend is unavailable"
			s.log.WarnContext(r.Context(), "dashboard could not list locks",
				slog.String(keyRequestID, requestID(r.Context())), slog.String(keyError, err.Error()))
		}
		d.Locks = redactLeases(infos)
		s.render(w, r, s.pages.index, d)
	}
}

type phaseView struct {
	Phase runs.Phase
	Title string
	Steps []runs.Step
}

type runData struct {
	Title  string
	Run    runs.Run
	Phases []phaseView
}

// handleRunPage serves GET /runs/{id}: Phase 1, Phase 2 and mobile, live.
func (s *server) handleRunPage() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		run, err := s.runParam(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.render(w, r, s.pages.run, runData{
			Title: run.Pipeline + " " + run.ID,
			Run:   run,
			Phases: []phaseView{
				{Phase: runs.Phase1, Title: "Phase 1 — sync", Steps: run.StepsOf(runs.Phase1)},
				{Phase: runs.Phase2, Title: "Phase 2 — deploy", Steps: run.StepsOf(runs.Phase2)},
				{Phase: runs.PhaseMobile, Title: "Mobile", Steps: run.StepsOf(runs.PhaseMobile)},
			},
		})
	}
}

// handleStatic serves the embedded CSS and JS under /static/, and nothing else: no directory
// listings, no path that climbs out of web/static.
func (s *server) handleStatic() http.Handler {
	sub, err := fs.Sub(webFS, "web/static")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory
	}
	files := http.StripPrefix("/static", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") || strings.Contains(r.URL.Path, "..") {
			s.writeError(w, r, newHTTPError(http.StatusNotFound, "not_found", "no such file"))
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=300")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		files.ServeHTTP(w, r)
	})
}

// tokenCookie turns ?token= on a dashboard page into the session cookie and redirects to the
// page without it, so the token leaves the address bar and never reaches a log line.
func (s *server) tokenCookie(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		tok := q.Get("token")
		if tok == "" {
			next(w, r)
			return
		}
		probe := r.Clone(r.Context())
		probe.Header = http.Header{"Authorization": {"Bearer " + tok}}
		if _, _, valid := s.auth.identify(probe); !valid {
			s.writeError(w, r, &httpError{status: http.StatusForbidden, code: "forbidden", message: "the token is not valid for this daemon"})
			return
		}
		http.SetCookie(w, &http.Cookie{
			Name: cookieName, Value: tok, Path: "/", HttpOnly: true,
			Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, MaxAge: int((12 * time.Hour).Seconds()),
		})
		q.Del("token")
		u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
		http.Redirect(w, r, u.String(), http.StatusSeeOther)
	}
}
