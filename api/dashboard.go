package api

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// The dashboard: server-rendered pages (html/template) with their CSS and JS embedded, no
// CDN. The run page follows the run's SSE stream and redraws its steps as they move, and its
// timeline (static/timeline.js: inline SVG, one bar per step along time) with them.
//
// The pages offer what the session's token may do (session.go): with the trigger or admin
// token, cancel a run; with the admin token, force-release a lock (at the fence shown),
// freeze and unfreeze one. The actions are forms that the page's script sends to the JSON
// API (/v1/...), with the cookie, and whose answer, error included, the page shows.
// Without a token the pages answer the login form; an unknown page answers an HTML 404.

//go:embed web/*.html web/static
var webFS embed.FS

// pages holds the parsed templates.
type pages struct {
	index    *template.Template
	services *template.Template
	history  *template.Template
	delivery *template.Template
	run      *template.Template
	login    *template.Template
	error    *template.Template
	audit    *template.Template
}

var pageFuncs = template.FuncMap{
	"clock": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("15:04:05Z")
	},
	"date": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.DateOnly)
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
	"detail":  stepDetail,
	"percent": func(f float64) string { return strconv.FormatFloat(100*f, 'f', 0, 64) + "%" },
	// operable: whether the lock actions (release, freeze, unfreeze) can take key; the API
	// refuses every other key (a daemon's own leases), so the page offers none for it.
	"operable": func(key string) bool { return orchestrator.CheckLockKey(key) == nil },
	// namespaces: the operator namespaces, for index.js's copy of that choice.
	"namespaces": func() string { return strings.Join(orchestrator.Namespaces(), " ") },
}

func newPages() *pages {
	parse := func(name string) *template.Template {
		return template.Must(template.New(name).Funcs(pageFuncs).ParseFS(webFS, "web/layout.html", "web/"+name))
	}
	return &pages{index: parse("index.html"), services: parse("services.html"), history: parse("lockhistory.html"), delivery: parse("delivery.html"), run: parse("run.html"), login: parse("login.html"), error: parse("error.html"), audit: parse("audit.html")}
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

// supersededNote is what a superseded step's detail says when the run's events do not
// name the newer run (run.js says the same).
const supersededNote = "not deployed by this run: a newer run re-synced the service"

// stepDetail is the step's error, its note, or what it changed and deployed (names, never values). A
// superseded step says why it was not deployed: its service.superseded event's message, from
// notes (by "phase/name"), as the CLI prints it.
func stepDetail(s runs.Step, notes map[string]string) string {
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
	if s.Status == runs.StepSuperseded {
		note := notes[string(s.Phase)+"/"+s.Name]
		if note == "" {
			note = supersededNote
		}
		parts = append(parts, note)
	}
	if c := s.Changes.String(); c != "" {
		parts = append(parts, c)
	}
	if s.DeploymentUUID != "" {
		parts = append(parts, "deployment "+s.DeploymentUUID)
	}
	return strings.Join(parts, "; ")
}

// render executes a page into a buffer first, so a template error answers 500 cleanly.
func (s *server) render(w http.ResponseWriter, r *http.Request, status int, t *template.Template, data any) {
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
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

type errorData struct {
	Title   string
	Session session
	Status  int
	Message string
}

// pageError answers err as an HTML page, with the status the API would answer.
func (s *server) pageError(w http.ResponseWriter, r *http.Request, err error) {
	status, detail, retryAfter := s.noteError(r, err)
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	title := http.StatusText(status)
	if status == http.StatusNotFound {
		title = "Not found"
	}
	s.render(w, r, status, s.pages.error, errorData{Title: title, Session: sessionOf(r), Status: status, Message: detail.Message})
}

// answerError answers err as a page to a browser asking for one (wantsPage), else as JSON.
func (s *server) answerError(w http.ResponseWriter, r *http.Request, err error) {
	if wantsPage(r) {
		s.pageError(w, r, err)
		return
	}
	s.writeError(w, r, err)
}

// wantsPage reports whether a request is a browser's for a page (GET or HEAD outside /v1/,
// accepting HTML), so an error answers a page rather than JSON.
func wantsPage(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		!strings.HasPrefix(r.URL.Path, "/v1/") &&
		strings.Contains(r.Header.Get("Accept"), "text/html")
}

type indexData struct {
	Title   string
	Session session
	Runs    []runs.Run
	// Awaiting are the runs that wait for a decision (approval), oldest first.
	Awaiting []runs.Run
	// Windows are the pipelines with deploy windows and their verdict now.
	Windows  []windowView
	Locks    []lockView
	LocksErr string
}

// handleDashboard serves GET /: recent runs and the current locks.
func (s *server) handleDashboard() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		page, err := s.runs.List(r.Context(), runs.Filter{Limit: 30, ReadOnly: true}) // only shown
		if err != nil {
			s.pageError(w, r, err)
			return
		}
		d := indexData{Title: "Dashboard", Session: sessionOf(r), Runs: page.Runs, Windows: s.windowViews()}
		// Runs awaiting an approval, and runs in a phase whose analysis asks a person.
		waiting, err := s.runs.List(r.Context(), runs.Filter{Status: []runs.Status{runs.StatusAwaiting, runs.StatusPhase2, runs.StatusMobile},
			Limit: 50, ReadOnly: true})
		if err != nil {
			s.pageError(w, r, err)
			return
		}
		for _, run := range waiting.Runs {
			if run.Status == runs.StatusAwaiting || run.Decision != nil && run.Decision.Outcome == "" {
				d.Awaiting = append(d.Awaiting, run)
			}
		}
		slices.Reverse(d.Awaiting)
		infos, err := s.locks.List(r.Context(), "")
		if err != nil {
			d.LocksErr = "the lock backend is unavailable"
			s.log.WarnContext(r.Context(), "dashboard could not list locks",
				slog.String(logkey.RequestID, requestID(r.Context())), slog.String(logkey.Error, err.Error()))
		}
		if d.Locks, err = s.lockViews(r.Context(), infos); err != nil {
			d.Locks = nil
			for _, l := range redactLeases(infos) {
				d.Locks = append(d.Locks, lockView{Info: l}) // without the waiting runs
			}
		}
		s.render(w, r, http.StatusOK, s.pages.index, d)
	}
}

type servicesData struct {
	Title    string
	Session  session
	Services []orchestrator.Service
	Err      string
}

// handleServicesPage serves GET /services: what each service runs now, since when, by
// which run, and its last deployment (GET /v1/services, drawn).
func (s *server) handleServicesPage() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		d := servicesData{Title: "Services", Session: sessionOf(r)}
		list, err := s.engine.Services(r.Context())
		if err != nil {
			d.Err = "the services could not be read: " + err.Error()
			s.log.WarnContext(r.Context(), "dashboard could not read the services",
				slog.String(logkey.RequestID, requestID(r.Context())), slog.String(logkey.Error, err.Error()))
		}
		d.Services = list
		s.render(w, r, http.StatusOK, s.pages.services, d)
	}
}

type deliveryData struct {
	Title   string
	Session session
	Days    int
	Windows []int
	Figures []runs.Figures
	Err     string
}

// handleDeliveryPage serves GET /delivery?days=: each pipeline's delivery figures.
func (s *server) handleDeliveryPage() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		days, err := deliveryDays(r)
		if err != nil {
			days = 30
		}
		d := deliveryData{Title: "Delivery figures", Session: sessionOf(r), Days: days, Windows: runs.Windows}
		if res, err := s.delivery(r.Context(), days); err != nil {
			d.Err = "the runs could not be read: " + err.Error()
		} else {
			d.Figures = res.Pipelines
		}
		s.render(w, r, http.StatusOK, s.pages.delivery, d)
	}
}

type historyData struct {
	Title   string
	Session session
	Period  string
}

// handleLockHistoryPage serves GET /locks/history?period=: the page draws GET
// /v1/locks/history itself.
func (s *server) handleLockHistoryPage() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Query().Get("period")
		if _, ok := historyPeriods[p]; !ok {
			p = "1h"
		}
		s.render(w, r, http.StatusOK, s.pages.history, historyData{Title: "Lock history", Session: sessionOf(r), Period: p})
	}
}

type phaseView struct {
	Phase  runs.Phase
	Title  string
	Groups []stepGroup
}

// stepGroup is a run of steps under an optional heading: the Phase-2 steps of one wave
// ("Wave 2 of 3") when the pipeline has more than one, else all steps of the phase, untitled.
type stepGroup struct {
	Title string
	Steps []runs.Step
}

// phaseOf lays out one phase of run for the page; run.js groups the same way.
func phaseOf(run runs.Run, phase runs.Phase, title string) phaseView {
	steps := run.StepsOf(phase)
	v := phaseView{Phase: phase, Title: title}
	var waves []int
	for _, st := range steps {
		if !slices.Contains(waves, st.Wave) {
			waves = append(waves, st.Wave)
		}
	}
	if len(waves) < 2 {
		return phaseView{Phase: phase, Title: title, Groups: []stepGroup{{Steps: steps}}}
	}
	slices.Sort(waves)
	for i, w := range waves {
		g := stepGroup{Title: fmt.Sprintf("Wave %d of %d", i+1, len(waves))}
		for _, st := range steps {
			if st.Wave == w {
				g.Steps = append(g.Steps, st)
			}
		}
		v.Groups = append(v.Groups, g)
	}
	return v
}

type runData struct {
	Title   string
	Session session
	Run     runs.Run
	Phases  []phaseView
	// Notes are the messages of the run's service.superseded events, by "phase/name".
	Notes map[string]string
}

// handleRunPage serves GET /runs/{id}: Phase 1, Phase 2 and mobile, live.
func (s *server) handleRunPage() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		run, err := s.runParam(r)
		if err != nil {
			s.pageError(w, r, err)
			return
		}
		notes, err := s.supersededNotes(r, run)
		if err != nil {
			s.pageError(w, r, err)
			return
		}
		s.render(w, r, http.StatusOK, s.pages.run, runData{
			Title:   run.Pipeline + " " + run.ID,
			Session: sessionOf(r),
			Run:     run,
			Phases: []phaseView{
				phaseOf(run, runs.Phase1, "Phase 1 — sync"),
				phaseOf(run, runs.Phase2, "Phase 2 — deploy"),
				phaseOf(run, runs.PhaseMobile, "Mobile"),
			},
			Notes: notes,
		})
	}
}

// supersededNotes reads the run's events for the messages of its service.superseded events,
// by "phase/name"; only when a step was superseded (rarely), else it reads nothing.
func (s *server) supersededNotes(r *http.Request, run runs.Run) (map[string]string, error) {
	if !slices.ContainsFunc(run.Steps, func(st runs.Step) bool { return st.Status == runs.StepSuperseded }) {
		return nil, nil
	}
	evs, err := s.runs.Events(r.Context(), run.ID, 0, 0)
	if err != nil {
		return nil, err
	}
	notes := map[string]string{}
	for _, ev := range evs {
		if ev.Type == runs.EventServiceSuperseded && ev.Message != "" {
			notes[string(ev.Phase)+"/"+ev.Service] = ev.Message
		}
	}
	return notes, nil
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

// windowView is one pipeline's deploy windows as the dashboard shows them.
type windowView struct {
	Pipeline string
	Open     bool
	Verdict  string
	Outside  string
}

// windowViews lists the loaded pipelines that have deploy windows, by name, with the
// verdict now.
func (s *server) windowViews() []windowView {
	var out []windowView
	for _, name := range slices.Sorted(maps.Keys(s.pipelines)) {
		p := s.pipelines[name]
		if w := p.Windows.Gates(); !w.Empty() {
			v := w.Verdict(s.now())
			out = append(out, windowView{Pipeline: name, Open: v.Open, Verdict: v.String(), Outside: string(p.Windows.Outside)})
		}
	}
	return out
}
