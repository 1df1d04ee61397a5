// Package redisstore is the runs.Store on Redis, for daemons on several hosts that share
// one Redis (the same one the lock backend uses). It works with a single server, Sentinel
// and Cluster through go-redis' UniversalClient.
//
// Layout, below a configurable prefix P (default "orch:runs:"). Every key carries the hash
// tag {runs}, so all of them live in one Cluster slot and the Lua scripts that touch several
// keys at once stay legal there:
//
//	P{runs}:run:<id>                  hash: h (the run's header: its JSON without steps),
//	                                  v (version), st, ow (instance), sk (sort key), n (step count),
//	                                  s:<i> (the JSON of step i, 0 ≤ i < n)
//	P{runs}:ev:<id>                   list of event JSON; an event's seq is its index + 1
//	P{runs}:idem:<len>:<pipeline>:<key> string: the run created with an idempotency key
//	P{runs}:idx:all                   sorted set of sort keys (all scores 0: ordered by bytes)
//	P{runs}:idx:pl:<pipeline>         … of one pipeline
//	P{runs}:idx:st:<status>           … in one status
//	P{runs}:idx:ps:<status>:<pipeline> … of one pipeline in one status
//	P{runs}:owner:<instance>          set of the unfinished run IDs an instance executes
//	P{runs}:dl:<delivery id>          webhook delivery marker, with the TTL
//	P{runs}:mark:<uuid>               hash: d (runs.Mark JSON), f (its fence), p:<pipeline>
//	                                  (the pipeline's mark on the resource, runs.Mark JSON)
//	P{runs}:rpt:<key>, rpts:<key>, rptdue, rptrun:<run id>, rptruns, rptscope
//	                                  reports to Git hosts (runs.ReportStore): see reports.go
//	P{runs}:audit, audit:head, audit:anchor
//	                                  the hash-chained audit log (runs.AuditLog): see audit.go
//
// The store is runs.Portable over this package's runs.Driver; the package adds
// runs.MarkStore, runs.ReportStore, runs.AuditLog, runs.Pruner and runs.Deliveries. Run writes are
// optimistic: Portable applies the change in Go and the driver commits it with a script that
// checks the version, writes the header and the steps that changed (an Update of one step of
// a 100-service run sends that step, not the whole run), moves the run between indexes,
// appends the events and publishes a signal on P{runs}:sig:<id>, all at once; on a version
// clash Portable reads again and retries. A read is one script (get.lua) that answers the
// whole hash, or only the version when the reader's decoded copy is current, so it never sees
// half an Update.
//
// Runs written whole by older builds (field d: the run's JSON, steps included) are read as
// they are; their first Update rewrites them in this layout. Older builds cannot read runs
// in this layout, so daemons sharing a Redis are upgraded together, not one by one.
//
// Live-follow signals reach another instance only while it follows the run: a Store
// subscribes to the run's signal channel while it has a follower of that run (see watcher).
package redisstore

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/redisack"
	"github.com/deploy-orchestrator/orchestrator/internal/redissub"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// DefaultPrefix is the key prefix when Options.Prefix is empty.
const DefaultPrefix = "orch:runs:"

// Options configure a Store.
type Options struct {
	// Prefix is put before every key and channel (default DefaultPrefix).
	Prefix string
	// Confirm, when not nil, makes the writes callers rely on (a run's creation, its
	// updates, the service marks and running records) count only once replicas confirmed
	// them (see redisack); an unconfirmed write fails with ErrUnavailable, which callers
	// retry. nil writes without waiting for replicas.
	Confirm *redisack.Confirmer
}

// Store is the run store on Redis: runs.Portable over this package's driver, plus the
// contracts the driver implements directly (marks, pruning, webhook deliveries). It is safe
// for concurrent use.
type Store struct {
	*runs.Portable
	d *driver
}

var _ runs.Driver = (*driver)(nil)

// driver is the runs.Driver on Redis.
type driver struct {
	rdb    redis.UniversalClient
	k      string // prefix + "{runs}:"
	ack    *redisack.Confirmer
	closed atomic.Bool

	watch *watcher // the signals of the runs this process watches

	pagesMu sync.Mutex
	pages   map[string][]string // list query → the run IDs of the page it answered last
}

// maxPages bounds driver.pages: the dashboard and API clients poll a handful of pages; past
// that many distinct queries the map starts over.
const maxPages = 64

// New returns a store on rdb. The caller keeps ownership of rdb: Close does not close it.
// New does not contact the server; use Ping for that.
func New(rdb redis.UniversalClient, opts Options) *Store {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	k := opts.Prefix + "{runs}:"
	d := &driver{rdb: rdb, k: k, ack: opts.Confirm, watch: newWatcher(rdb, k+"sig:")}
	return &Store{Portable: runs.New(d), d: d}
}

func (d *driver) runKey(id string) string     { return d.k + "run:" + id }
func (d *driver) evKey(id string) string      { return d.k + "ev:" + id }
func (d *driver) sigChan(id string) string    { return d.k + "sig:" + id }
func (d *driver) ownerKey(o string) string    { return d.k + "owner:" + o }
func (d *driver) allKey() string              { return d.k + "idx:all" }
func (d *driver) plKey(p string) string       { return d.k + "idx:pl:" + p }
func (d *driver) stKey(st runs.Status) string { return d.k + "idx:st:" + string(st) }
func (d *driver) psKey(st runs.Status, p string) string {
	return d.k + "idx:ps:" + string(st) + ":" + p
}
func (d *driver) idemKey(p, key string) string {
	return d.k + "idem:" + strconv.Itoa(len(p)) + ":" + p + ":" + key
}

func (d *driver) open(op string) error {
	if d.closed.Load() {
		return runs.Closed(op)
	}
	return nil
}

//go:embed create.lua
var createLua string

// createScript: KEYS run, idem, all, pl, st, ps, owner; ARGV header, status, instance, sk,
// id, has idem ("1"/"0"), step count, steps…. Returns {1} created, {0, existing id}, or
// {-1} for a taken ID.
var createScript = redis.NewScript(createLua)

// Insert implements runs.Driver.
func (d *driver) Insert(ctx context.Context, r runs.Run, e runs.Encoded) (string, error) {
	if err := d.open("insert"); err != nil {
		return "", err
	}
	hasIdem := "0"
	idem := d.idemKey(r.Pipeline, "")
	if r.Trigger.IdempotencyKey != "" {
		hasIdem = "1"
		idem = d.idemKey(r.Pipeline, r.Trigger.IdempotencyKey)
	}
	keys := []string{d.runKey(r.ID), idem, d.allKey(), d.plKey(r.Pipeline), d.stKey(r.Status),
		d.psKey(r.Status, r.Pipeline), d.ownerKey(r.Instance)}
	args := []any{e.Header, string(r.Status), r.Instance, e.SortKey, r.ID, hasIdem, len(e.Steps)}
	for _, st := range e.Steps {
		args = append(args, st.Data)
	}
	res, err := d.runWrite(ctx, createScript, keys, args...).Slice()
	if err != nil {
		return "", err
	}
	switch code, _ := res[0].(int64); code {
	case 1:
		return "", nil
	case 0:
		id, _ := res[1].(string)
		return id, nil
	default:
		return "", fmt.Errorf("run %q already exists: %w", r.ID, runs.ErrConflict)
	}
}

//go:embed get.lua
var getLua string

// getScript: KEYS runs; ARGV for each the version the caller holds. Returns for each nil
// (no run), the version (the caller's copy is current) or the run's hash.
var getScript = redis.NewScript(getLua)

// getBatch is how many runs one getScript call reads: a page of the API's list (50 by
// default) in one, and a longer read in several calls of one pipeline, so no single call
// holds Redis for long.
const getBatch = 64

// heldArg is the held version as getScript takes it ("" for none).
func heldArg(v int64) string {
	if v == 0 {
		return ""
	}
	return strconv.FormatInt(v, 10)
}

// Read implements runs.Driver.
func (d *driver) Read(ctx context.Context, id string, held int64) (runs.Record, error) {
	if err := d.open("read"); err != nil {
		return runs.Record{}, err
	}
	res, err := getScript.Run(ctx, d.rdb, []string{d.runKey(id)}, heldArg(held)).Slice()
	if err != nil {
		return runs.Record{}, err
	}
	if len(res) != 1 {
		return runs.Record{}, fmt.Errorf("run %q: %d answers to one read", id, len(res))
	}
	return record(id, res[0])
}

// ReadStatus implements runs.Driver.
func (d *driver) ReadStatus(ctx context.Context, id string) (runs.Status, error) {
	if err := d.open("read status"); err != nil {
		return "", err
	}
	st, err := d.rdb.HGet(ctx, d.runKey(id), "st").Result()
	if errors.Is(err, redis.Nil) {
		return "", runs.ErrNotFound
	}
	return runs.Status(st), err
}

// record turns getScript's answer for one run into its record: the version only when the
// caller holds it, else its hash. ErrNotFound when the run does not exist.
func record(id string, v any) (runs.Record, error) {
	if v == nil {
		return runs.Record{}, runs.ErrNotFound
	}
	if vs, ok := v.(string); ok {
		version, err := strconv.ParseInt(vs, 10, 64)
		if err != nil {
			return runs.Record{}, fmt.Errorf("run %q: version %q: %w", id, vs, err)
		}
		return runs.Record{ID: id, Version: version}, nil
	}
	flat, ok := v.([]any)
	if !ok || len(flat)%2 != 0 {
		return runs.Record{}, fmt.Errorf("run %q: unexpected answer %T", id, v)
	}
	h := make(map[string]string, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		k, _ := flat[i].(string)
		h[k], _ = flat[i+1].(string)
	}
	return decodeHash(id, h)
}

// decodeHash reads the run's record from its hash: header and step fields, or the whole run
// an older build wrote (field d).
func decodeHash(id string, h map[string]string) (runs.Record, error) {
	vs := h["v"]
	version, err := strconv.ParseInt(vs, 10, 64)
	if err != nil {
		return runs.Record{}, fmt.Errorf("run %q: version %q: %w", id, vs, err)
	}
	rec := runs.Record{ID: id, Version: version}
	if whole, ok := h["d"]; ok {
		rec.Header, rec.Legacy = []byte(whole), true
		return rec, nil
	}
	n, err := strconv.Atoi(h["n"])
	if err != nil {
		return runs.Record{}, fmt.Errorf("run %q: step count %q: %w", id, h["n"], err)
	}
	rec.Header = []byte(h["h"])
	rec.Steps = make([][]byte, n)
	for i := range rec.Steps {
		b, ok := h["s:"+strconv.Itoa(i)]
		if !ok {
			return runs.Record{}, fmt.Errorf("run %q: step %d of %d missing", id, i, n)
		}
		rec.Steps[i] = []byte(b)
	}
	return rec, nil
}

// List implements runs.Driver. With several statuses it reads one page from each status
// index and merges them.
func (d *driver) List(ctx context.Context, q runs.Query, held func(string) int64) ([]runs.Record, string, error) {
	if err := d.open("list"); err != nil {
		return nil, "", err
	}
	var idx []string
	switch {
	case len(q.Status) == 0 && q.Pipeline == "":
		idx = []string{d.allKey()}
	case len(q.Status) == 0:
		idx = []string{d.plKey(q.Pipeline)}
	default:
		for _, st := range q.Status {
			if q.Pipeline == "" {
				idx = append(idx, d.stKey(st))
			} else {
				idx = append(idx, d.psKey(st, q.Pipeline))
			}
		}
	}
	max := "+"
	if q.After != "" {
		max = "(" + q.After
	}
	// One more than the page tells whether there is a next page. The reads of the runs this
	// query answered last go in the same round trip: a page polled again, mostly the same
	// runs, then costs one round trip, not two, and only runs new to it need a second.
	pageKey := strings.Join(idx, " ") + " " + max + " " + strconv.Itoa(q.Limit)
	guess := d.lastPage(pageKey)
	pipe := d.rdb.Pipeline()
	cmds := make([]*redis.StringSliceCmd, len(idx))
	for i, key := range idx {
		cmds[i] = pipe.ZRevRangeByLex(ctx, key, &redis.ZRangeBy{Max: max, Min: "-", Count: int64(q.Limit + 1)})
	}
	guessed := d.queueGets(ctx, pipe, guess, held)
	_, _ = pipe.Exec(ctx) // each command's error is checked below
	var sks []string
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return nil, "", err
		}
		sks = append(sks, c.Val()...)
	}
	slices.SortFunc(sks, func(a, b string) int { return strings.Compare(b, a) })
	more := len(sks) > q.Limit
	if more {
		sks = sks[:q.Limit]
	}
	ids := make([]string, len(sks))
	for i, sk := range sks {
		_, id, err := runs.SplitSortKey(sk)
		if err != nil {
			return nil, "", fmt.Errorf("index entry %q: %w", sk, err)
		}
		ids[i] = id
	}
	d.setLastPage(pageKey, ids)

	// The guessed reads, unless they failed (NOSCRIPT: getMany loads the script); then the
	// runs they did not cover.
	got, err := records(guess, guessed)
	if err != nil {
		got = nil
	}
	var missing []string
	for _, id := range ids {
		if _, ok := got[id]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		fetched, err := d.getMany(ctx, missing, held)
		if err != nil {
			return nil, "", err
		}
		if got == nil {
			got = fetched
		} else {
			maps.Copy(got, fetched)
		}
	}
	next := ""
	if more {
		// From the last index entry considered, so a skipped run does not repeat a page.
		next = sks[len(sks)-1]
	}
	return found(ids, got), next, nil
}

// found returns the records of runs ids that got holds and that exist, in the order of ids.
func found(ids []string, got map[string]runs.Record) []runs.Record {
	recs := make([]runs.Record, 0, len(ids))
	for _, id := range ids {
		if rec := got[id]; rec.ID != "" { // an index entry without run: the scripts never leave one; skip defensively
			recs = append(recs, rec)
		}
	}
	return recs
}

// lastPage returns the run IDs the list query pageKey answered last.
func (d *driver) lastPage(pageKey string) []string {
	d.pagesMu.Lock()
	defer d.pagesMu.Unlock()
	return d.pages[pageKey]
}

// setLastPage remembers the run IDs the list query pageKey answered.
func (d *driver) setLastPage(pageKey string, ids []string) {
	d.pagesMu.Lock()
	defer d.pagesMu.Unlock()
	if _, ok := d.pages[pageKey]; !ok && len(d.pages) >= maxPages {
		clear(d.pages)
	}
	if d.pages == nil {
		d.pages = make(map[string][]string)
	}
	d.pages[pageKey] = ids
}

// getMany reads the records of runs ids in one round trip (loading the script first if Redis
// lost it: EVALSHA cannot fall back to EVAL inside a pipeline). A run that is gone has a
// zero record, with an empty ID.
func (d *driver) getMany(ctx context.Context, ids []string, held func(string) int64) (map[string]runs.Record, error) {
	for attempt := 0; ; attempt++ {
		pipe := d.rdb.Pipeline()
		cmds := d.queueGets(ctx, pipe, ids, held)
		_, err := pipe.Exec(ctx)
		if err != nil {
			if attempt > 0 || !redis.HasErrorPrefix(err, "NOSCRIPT") {
				return nil, err
			}
			if err := getScript.Load(ctx, d.rdb).Err(); err != nil {
				return nil, err
			}
			continue
		}
		return records(ids, cmds)
	}
}

// queueGets adds to pipe the getScript calls that read runs ids, getBatch runs each: a page
// of the API's list (50 by default) in one call, a longer read in several, so no single call
// holds Redis for long.
func (d *driver) queueGets(ctx context.Context, pipe redis.Pipeliner, ids []string, held func(string) int64) []*redis.Cmd {
	var cmds []*redis.Cmd
	for batch := range slices.Chunk(ids, getBatch) {
		keys, versions := make([]string, len(batch)), make([]any, len(batch))
		for i, id := range batch {
			keys[i], versions[i] = d.runKey(id), heldArg(held(id))
		}
		cmds = append(cmds, getScript.EvalSha(ctx, pipe, keys, versions...))
	}
	return cmds
}

// records reads the answers of queueGets(ids): every run's record by ID, a zero one (empty
// ID) for a run that is gone.
func records(ids []string, cmds []*redis.Cmd) (map[string]runs.Record, error) {
	out := make(map[string]runs.Record, len(ids))
	for k, c := range cmds {
		batch := ids[k*getBatch : min(len(ids), (k+1)*getBatch)]
		res, err := c.Slice()
		if err == nil && len(res) != len(batch) {
			err = fmt.Errorf("%d answers to a read of %d runs", len(res), len(batch))
		}
		if err != nil {
			return nil, err
		}
		for i, v := range res {
			rec, err := record(batch[i], v)
			if err != nil && !errors.Is(err, runs.ErrNotFound) {
				return nil, err
			}
			out[batch[i]] = rec
		}
	}
	return out, nil
}

//go:embed update.lua
var updateLua string

// updateScript: KEYS run, ev, st old, st new, ps old, ps new, owner old, owner new; ARGV
// expected version, header, new version, status, instance, sk, id, signal channel, add to
// instance set ("1"/"0"), step count, all steps sent ("1"/"0"), number of steps sent,
// (position, step) pairs, events… Returns the new event count, -1 not found, -2 version
// clash, -3 stored whole by an older build and not all steps sent.
var updateScript = redis.NewScript(updateLua)

// Write implements runs.Driver. A run still stored whole by an older build gets all its
// steps, in the same call.
func (d *driver) Write(ctx context.Context, cur, next runs.Run, e runs.Encoded, evs []runs.Event) ([]runs.Event, error) {
	if err := d.open("write"); err != nil {
		return nil, err
	}
	keys := []string{
		d.runKey(cur.ID), d.evKey(cur.ID),
		d.stKey(cur.Status), d.stKey(next.Status),
		d.psKey(cur.Status, cur.Pipeline), d.psKey(next.Status, cur.Pipeline),
		d.ownerKey(cur.Instance), d.ownerKey(next.Instance),
	}
	addInstance := "0"
	if next.Instance != "" && !next.Status.Terminal() {
		addInstance = "1"
	}
	events, err := encodeEvents(evs)
	if err != nil {
		return nil, err
	}
	run := func(steps []runs.StepData, all string) (int64, error) {
		args := []any{cur.Version, e.Header, next.Version, string(next.Status), next.Instance, e.SortKey,
			cur.ID, d.sigChan(cur.ID), addInstance, len(next.Steps), all, len(steps)}
		for _, st := range steps {
			args = append(args, st.Pos, st.Data)
		}
		return d.runWrite(ctx, updateScript, keys, append(args, events...)...).Int64()
	}
	n, err := run(e.Steps, "0")
	if err == nil && n == -3 {
		whole, werr := runs.EncodeRun(next)
		if werr != nil {
			return nil, werr
		}
		n, err = run(whole.Steps, "1")
	}
	switch {
	case err != nil:
		return nil, err
	case n == -1:
		return nil, runs.ErrNotFound
	case n == -2:
		return nil, runs.ErrVersion
	case n < 0:
		return nil, fmt.Errorf("update script answered %d", n)
	}
	return numbered(evs, n), nil
}

// encodeEvents encodes evs for the log list, where an event's seq is its index + 1.
func encodeEvents(evs []runs.Event) ([]any, error) {
	out := make([]any, len(evs))
	for i, e := range evs {
		e.Seq = 0 // the list index is the seq
		b, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("encode event: %w", err)
		}
		out[i] = b
	}
	return out, nil
}

// numbered sets the seqs of evs, the last events of a log now n long.
func numbered(evs []runs.Event, n int64) []runs.Event {
	for i := range evs {
		evs[i].Seq = n - int64(len(evs)) + int64(i) + 1
	}
	return evs
}

//go:embed append.lua
var appendLua string

// appendScript: KEYS run, ev; ARGV signal channel, events… Returns the new event count, or
// -1 when the run does not exist.
var appendScript = redis.NewScript(appendLua)

// Append implements runs.Driver.
func (d *driver) Append(ctx context.Context, id string, evs []runs.Event) ([]runs.Event, error) {
	if err := d.open("append"); err != nil {
		return nil, err
	}
	events, err := encodeEvents(evs)
	if err != nil {
		return nil, err
	}
	n, err := appendScript.Run(ctx, d.rdb, []string{d.runKey(id), d.evKey(id)}, append([]any{d.sigChan(id)}, events...)...).Int64()
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, runs.ErrNotFound
	}
	return numbered(evs, n), nil
}

// Events implements runs.Driver.
func (d *driver) Events(ctx context.Context, id string, afterSeq int64, limit int) ([]runs.Event, error) {
	if err := d.open("events"); err != nil {
		return nil, err
	}
	stop := int64(-1)
	if limit > 0 {
		stop = afterSeq + int64(limit) - 1
	}
	pipe := d.rdb.Pipeline()
	exists := pipe.Exists(ctx, d.runKey(id))
	rng := pipe.LRange(ctx, d.evKey(id), afterSeq, stop)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	if exists.Val() == 0 {
		return nil, runs.ErrNotFound
	}
	out := make([]runs.Event, 0, len(rng.Val()))
	for i, raw := range rng.Val() {
		var e runs.Event
		if err := json.Unmarshal([]byte(raw), &e); err != nil {
			return nil, fmt.Errorf("decode event %d: %w", afterSeq+int64(i)+1, err)
		}
		e.Seq = afterSeq + int64(i) + 1
		out = append(out, e)
	}
	return out, nil
}

// Watch implements runs.Driver: a subscription to the run's signal channel, shared by the
// run's watchers in this process and confirmed by Redis before it returns (see watcher).
func (d *driver) Watch(ctx context.Context, id string, signal func(string)) (stop func(), err error) {
	if err := d.open("watch"); err != nil {
		return nil, err
	}
	stop, err = d.watch.watch(ctx, id, signal)
	if errors.Is(err, redissub.ErrClosed) {
		return nil, runs.Closed("watch")
	}
	return stop, err
}

// Unfinished implements runs.Driver: an instance's from its set of unfinished runs, every
// instance's from the status indexes.
func (d *driver) Unfinished(ctx context.Context, instance string, held func(string) int64) ([]runs.Record, error) {
	if err := d.open("unfinished"); err != nil {
		return nil, err
	}
	if instance != "" {
		ids, err := d.rdb.SMembers(ctx, d.ownerKey(instance)).Result()
		if err != nil || len(ids) == 0 {
			return nil, err
		}
		got, err := d.getMany(ctx, ids, held)
		return found(ids, got), err
	}
	var active []runs.Status
	for _, st := range runs.Statuses {
		if !st.Terminal() {
			active = append(active, st)
		}
	}
	q := runs.Query{Status: active, Limit: runs.MaxLimit}
	var out []runs.Record
	for {
		recs, next, err := d.List(ctx, q, held)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
		if next == "" {
			return out, nil
		}
		q.After = next
	}
}

// SeenDelivery implements runs.Deliveries with SET NX PX.
func (s *Store) SeenDelivery(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	if id == "" || ttl <= 0 {
		return false, fmt.Errorf("seen delivery: empty id or ttl %s: %w", ttl, runs.ErrInvalid)
	}
	op := fmt.Sprintf("seen delivery %q", id)
	if err := s.d.open(op); err != nil {
		return false, err
	}
	fresh, err := s.d.rdb.SetNX(ctx, s.d.k+"dl:"+id, 1, ttl).Result()
	if err != nil {
		return false, runs.Fail(op, err)
	}
	return !fresh, nil
}

// Ping implements runs.Driver.
func (d *driver) Ping(ctx context.Context) error {
	if err := d.open("ping"); err != nil {
		return err
	}
	return d.rdb.Ping(ctx).Err()
}

// Close implements runs.Driver: it ends the run signals' subscription and waits for the
// goroutine reading it. It does not close the Redis client. Calling it again returns nil.
func (d *driver) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	return d.watch.close()
}
