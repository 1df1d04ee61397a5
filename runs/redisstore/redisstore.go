// Package redisstore is the runs.Store on Redis, for daemons on several hosts that share
// one Redis (the same one the lock backend uses). It works with a single server, Sentinel
// and Cluster through go-redis' UniversalClient.
//
// Layout, below a configurable prefix P (default "orch:runs:"). Every key carries the hash
// tag {runs}, so all of them live in one Cluster slot and the Lua scripts that touch several
// keys at once stay legal there:
//
//	P{runs}:run:<id>                  hash: h (the run's header: its JSON without steps),
//	                                  v (version), st, ow, sk (sort key), n (step count),
//	                                  s:<i> (the JSON of step i, 0 ≤ i < n)
//	P{runs}:ev:<id>                   list of event JSON; an event's seq is its index + 1
//	P{runs}:idem:<len>:<pipeline>:<key> string: the run created with an idempotency key
//	P{runs}:idx:all                   sorted set of sort keys (all scores 0: ordered by bytes)
//	P{runs}:idx:pl:<pipeline>         … of one pipeline
//	P{runs}:idx:st:<status>           … in one status
//	P{runs}:idx:ps:<status>:<pipeline> … of one pipeline in one status
//	P{runs}:owner:<owner>             set of the unfinished run IDs an instance executes
//	P{runs}:dl:<delivery id>          webhook delivery marker, with the TTL
//	P{runs}:mark:<uuid>               hash: d (runs.Mark JSON), f (its fence)
//
// Run writes are optimistic: the store reads the run, applies the change in Go and commits
// with a script that checks the version, writes the header and the steps that changed
// (storekit.ChangedSteps: an Update of one step of a 100-service run sends that step, not
// the whole run), moves the run between indexes, appends the events and publishes a signal
// on P{runs}:sig:<id>, all at once; on a version clash it reads again and retries. A read
// is one script (get.lua) that answers the whole hash, or only the version when the
// reader's cached copy is current, so it never sees half an Update.
//
// Runs written whole by older builds (field d: the run's JSON, steps included) are read as
// they are; their first Update rewrites them in this layout. Older builds cannot read runs
// in this layout, so daemons sharing a Redis are upgraded together, not one by one.
//
// Live-follow signals reach every instance through one pattern subscription per Store.
package redisstore

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/internal/storekit"
)

// DefaultPrefix is the key prefix when Options.Prefix is empty.
const DefaultPrefix = "orch:runs:"

// maxAttempts bounds the optimistic retries of one Update. Each failed attempt means another
// writer's attempt succeeded, so this is only reached under extreme contention.
const maxAttempts = 100

// Options configure a Store.
type Options struct {
	// Prefix is put before every key and channel (default DefaultPrefix).
	Prefix string
}

// Store is a runs.Store on Redis. It is safe for concurrent use.
type Store struct {
	rdb    redis.UniversalClient
	k      string // prefix + "{runs}:"
	hub    *storekit.Hub
	cache  *storekit.Cache // runs this Store wrote last: Update tries them without a read
	closed atomic.Bool
	now    func() time.Time

	mu sync.Mutex     // guards ps
	ps *redis.PubSub  // the pattern subscription, started by the first Subscribe
	wg sync.WaitGroup // the goroutine forwarding ps messages to hub
}

var _ runs.Store = (*Store)(nil)

// New returns a store on rdb. The caller keeps ownership of rdb: Close does not close it.
// New does not contact the server; use Ping for that.
func New(rdb redis.UniversalClient, opts Options) *Store {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	return &Store{rdb: rdb, k: opts.Prefix + "{runs}:", hub: storekit.NewHub(), cache: storekit.NewCache(0), now: time.Now}
}

func (s *Store) runKey(id string) string     { return s.k + "run:" + id }
func (s *Store) evKey(id string) string      { return s.k + "ev:" + id }
func (s *Store) sigChan(id string) string    { return s.k + "sig:" + id }
func (s *Store) ownerKey(o string) string    { return s.k + "owner:" + o }
func (s *Store) allKey() string              { return s.k + "idx:all" }
func (s *Store) plKey(p string) string       { return s.k + "idx:pl:" + p }
func (s *Store) stKey(st runs.Status) string { return s.k + "idx:st:" + string(st) }
func (s *Store) psKey(st runs.Status, p string) string {
	return s.k + "idx:ps:" + string(st) + ":" + p
}
func (s *Store) idemKey(p, key string) string {
	return s.k + "idem:" + strconv.Itoa(len(p)) + ":" + p + ":" + key
}

func (s *Store) open(op string) error {
	if s.closed.Load() {
		return storekit.Fail(op, fmt.Errorf("%w: %w", runs.ErrUnavailable, storekit.ErrClosed))
	}
	return nil
}

//go:embed create.lua
var createLua string

// createScript: KEYS run, idem, all, pl, st, ps, owner; ARGV header, status, owner, sk, id,
// has idem ("1"/"0"), step count, steps…. Returns {1} created, {0, existing id}, or {-1}
// for a taken ID.
var createScript = redis.NewScript(createLua)

// Create implements runs.Store.
func (s *Store) Create(ctx context.Context, in runs.Run) (runs.Run, bool, error) {
	r, err := storekit.PrepareCreate(in, s.now())
	if err != nil {
		return runs.Run{}, false, err
	}
	op := "create run"
	if err := s.open(op); err != nil {
		return runs.Run{}, false, err
	}
	header, err := storekit.EncodeHeader(r)
	if err != nil {
		return runs.Run{}, false, fmt.Errorf("%s: encode: %w", op, err)
	}
	hasIdem := "0"
	idem := s.idemKey(r.Pipeline, "")
	if r.Trigger.IdempotencyKey != "" {
		hasIdem = "1"
		idem = s.idemKey(r.Pipeline, r.Trigger.IdempotencyKey)
	}
	keys := []string{s.runKey(r.ID), idem, s.allKey(), s.plKey(r.Pipeline), s.stKey(r.Status),
		s.psKey(r.Status, r.Pipeline), s.ownerKey(r.Instance)}
	args := []any{header, string(r.Status), r.Instance, storekit.SortKey(r), r.ID, hasIdem, len(r.Steps)}
	for i := range r.Steps {
		b, err := storekit.EncodeStep(r.Steps[i])
		if err != nil {
			return runs.Run{}, false, fmt.Errorf("%s: encode step %d: %w", op, i, err)
		}
		args = append(args, b)
	}
	res, err := createScript.Run(ctx, s.rdb, keys, args...).Slice()
	if err != nil {
		return runs.Run{}, false, storekit.Fail(op, err)
	}
	switch code, _ := res[0].(int64); code {
	case 1:
		s.cache.Put(r)
		return r, true, nil
	case 0:
		id, _ := res[1].(string)
		existing, err := s.Get(ctx, id)
		if err != nil {
			return runs.Run{}, false, fmt.Errorf("%s: idempotency key %q: %w", op, r.Trigger.IdempotencyKey, err)
		}
		if err := storekit.CheckReuse(existing, r); err != nil {
			return runs.Run{}, false, err
		}
		return existing, false, nil
	default:
		return runs.Run{}, false, fmt.Errorf("%s: run %q already exists: %w", op, r.ID, runs.ErrConflict)
	}
}

// Get implements runs.Store.
func (s *Store) Get(ctx context.Context, id string) (runs.Run, error) {
	return s.get(ctx, id)
}

//go:embed get.lua
var getLua string

// getScript: KEYS run; ARGV the version the caller holds. Returns nil (no run), the version
// (the caller's copy is current) or the run's hash.
var getScript = redis.NewScript(getLua)

// get reads the run; when the cache holds its stored version, Redis sends only the version.
func (s *Store) get(ctx context.Context, id string) (runs.Run, error) {
	op := fmt.Sprintf("get run %q", id)
	if err := s.open(op); err != nil {
		return runs.Run{}, err
	}
	r, ok, err := s.decode(ctx, id, getScript.Run(ctx, s.rdb, []string{s.runKey(id)}, s.held(id)), false)
	if err != nil {
		return runs.Run{}, storekit.Fail(op, err)
	}
	if !ok {
		return runs.Run{}, fmt.Errorf("%s: %w", op, runs.ErrNotFound)
	}
	return r, nil
}

// held is the version of run id in the cache ("" if none), for getScript.
func (s *Store) held(id string) string {
	if c, ok := s.cache.Get(id); ok {
		return strconv.FormatInt(c.Version, 10)
	}
	return ""
}

// decode turns getScript's answer into the run (false if it does not exist): the cached
// copy when the answer is its version, else the run decoded from its hash, and cached. With
// shared, a cached run is answered without a copy (see runs.Filter.ReadOnly).
func (s *Store) decode(ctx context.Context, id string, res *redis.Cmd, shared bool) (runs.Run, bool, error) {
	v, err := res.Result()
	if errors.Is(err, redis.Nil) {
		return runs.Run{}, false, nil
	}
	if err != nil {
		return runs.Run{}, false, err
	}
	if vs, ok := v.(string); ok {
		version, err := strconv.ParseInt(vs, 10, 64)
		if err != nil {
			return runs.Run{}, false, fmt.Errorf("run %q: version %q: %w", id, vs, err)
		}
		if r, ok := s.cache.Lookup(id, version, shared); ok {
			return r, true, nil
		}
		// Evicted since: read it whole.
		return s.decode(ctx, id, getScript.Run(ctx, s.rdb, []string{s.runKey(id)}, ""), shared)
	}
	flat, ok := v.([]any)
	if !ok || len(flat)%2 != 0 {
		return runs.Run{}, false, fmt.Errorf("run %q: unexpected answer %T", id, v)
	}
	h := make(map[string]string, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		k, _ := flat[i].(string)
		h[k], _ = flat[i+1].(string)
	}
	return s.decodeHash(id, h)
}

// decodeHash decodes the run's hash and caches the run.
func (s *Store) decodeHash(id string, h map[string]string) (runs.Run, bool, error) {
	vs := h["v"]
	version, err := strconv.ParseInt(vs, 10, 64)
	if err != nil {
		return runs.Run{}, false, fmt.Errorf("run %q: version %q: %w", id, vs, err)
	}
	var r runs.Run
	if whole, ok := h["d"]; ok { // written whole by an older build
		r, err = storekit.DecodeRun(id, []byte(whole), nil, true)
	} else {
		r, err = decodeSplit(id, h)
	}
	if err != nil {
		return runs.Run{}, false, err
	}
	r.Version = version
	s.cache.Put(r)
	return r, true, nil
}

// decodeSplit decodes a run stored as header and step fields.
func decodeSplit(id string, h map[string]string) (runs.Run, error) {
	n, err := strconv.Atoi(h["n"])
	if err != nil {
		return runs.Run{}, fmt.Errorf("run %q: step count %q: %w", id, h["n"], err)
	}
	steps := make([][]byte, n)
	for i := range steps {
		b, ok := h["s:"+strconv.Itoa(i)]
		if !ok {
			return runs.Run{}, fmt.Errorf("run %q: step %d of %d missing", id, i, n)
		}
		steps[i] = []byte(b)
	}
	return storekit.DecodeRun(id, []byte(h["h"]), steps, false)
}

// List implements runs.Store. With several statuses it reads one page from each status
// index and merges them.
func (s *Store) List(ctx context.Context, f runs.Filter) (runs.Page, error) {
	q, err := storekit.ParseFilter(f)
	if err != nil {
		return runs.Page{}, err
	}
	op := "list runs"
	if err := s.open(op); err != nil {
		return runs.Page{}, err
	}
	var idx []string
	switch {
	case len(q.Status) == 0 && q.Pipeline == "":
		idx = []string{s.allKey()}
	case len(q.Status) == 0:
		idx = []string{s.plKey(q.Pipeline)}
	default:
		for _, st := range q.Status {
			if q.Pipeline == "" {
				idx = append(idx, s.stKey(st))
			} else {
				idx = append(idx, s.psKey(st, q.Pipeline))
			}
		}
	}
	max := "+"
	if q.After != "" {
		max = "(" + q.After
	}
	// One more than the page tells whether there is a next page.
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringSliceCmd, len(idx))
	for i, key := range idx {
		cmds[i] = pipe.ZRevRangeByLex(ctx, key, &redis.ZRangeBy{Max: max, Min: "-", Count: int64(q.Limit + 1)})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return runs.Page{}, storekit.Fail(op, err)
	}
	var sks []string
	for _, c := range cmds {
		sks = append(sks, c.Val()...)
	}
	slices.SortFunc(sks, func(a, b string) int { return strings.Compare(b, a) })
	more := len(sks) > q.Limit
	if more {
		sks = sks[:q.Limit]
	}
	if len(sks) == 0 {
		return runs.Page{Runs: []runs.Run{}}, nil
	}
	ids := make([]string, len(sks))
	for i, sk := range sks {
		_, id, err := storekit.SplitSortKey(sk)
		if err != nil {
			return runs.Page{}, storekit.Fail(op, fmt.Errorf("index entry %q: %w", sk, err))
		}
		ids[i] = id
	}
	gets, err := s.getMany(ctx, ids)
	if err != nil {
		return runs.Page{}, storekit.Fail(op, err)
	}
	page := runs.Page{Runs: make([]runs.Run, 0, len(sks))}
	for i, g := range gets {
		r, ok, err := s.decode(ctx, ids[i], g, f.ReadOnly)
		if err != nil {
			return runs.Page{}, storekit.Fail(op, err)
		}
		if !ok {
			continue // index entry without run: the scripts never leave one; skip defensively
		}
		if len(q.Status) > 0 && !slices.Contains(q.Status, r.Status) {
			continue // its status changed between the index read and this one
		}
		page.Runs = append(page.Runs, r)
	}
	if more {
		// From the last index entry considered, so a skipped run does not repeat a page.
		page.Next = storekit.CursorAt(sks[len(sks)-1])
	}
	return page, nil
}

// getMany runs getScript for each run in one pipeline (loading the script first if Redis
// lost it: EVALSHA cannot fall back to EVAL inside a pipeline).
func (s *Store) getMany(ctx context.Context, ids []string) ([]*redis.Cmd, error) {
	for attempt := 0; ; attempt++ {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(ids))
		for i, id := range ids {
			cmds[i] = getScript.EvalSha(ctx, pipe, []string{s.runKey(id)}, s.held(id))
		}
		_, err := pipe.Exec(ctx)
		if err == nil || errors.Is(err, redis.Nil) {
			return cmds, nil
		}
		if attempt > 0 || !redis.HasErrorPrefix(err, "NOSCRIPT") {
			return nil, err
		}
		if err := getScript.Load(ctx, s.rdb).Err(); err != nil {
			return nil, err
		}
	}
}

//go:embed update.lua
var updateLua string

// updateScript: KEYS run, ev, st old, st new, ps old, ps new, owner old, owner new; ARGV
// expected version, header, new version, status, owner, sk, id, signal channel, add to
// owner set ("1"/"0"), step count, all steps sent ("1"/"0"), number of steps sent, (position,
// step) pairs, events… Returns the new event count, -1 not found, -2 version clash, -3
// stored whole by an older build and not all steps sent.
var updateScript = redis.NewScript(updateLua)

// errRetry means another writer won the race: read again.
var errRetry = errors.New("version changed")

// Update implements runs.Store. fn is called once per attempt: again after another writer
// changed the run between the read and the write.
func (s *Store) Update(ctx context.Context, id string, fn func(*runs.Run) error, evs ...runs.Event) (runs.Run, error) {
	stamped, err := storekit.StampEvents(id, evs, s.now())
	if err != nil {
		return runs.Run{}, err
	}
	return s.update(ctx, id, func(cur runs.Run) (runs.Run, []runs.Event, error) {
		next, err := storekit.ApplyUpdate(cur, fn)
		return next, stamped, err
	})
}

// update is the optimistic read-modify-write loop under Update. apply
// returns the run to write and the (stamped) events to append; its errors are returned as is.
//
// The first attempt starts from the copy this Store wrote last, if it has one, without
// reading: the script's version check tells whether it was still current. Later attempts
// read the run.
func (s *Store) update(ctx context.Context, id string, apply func(runs.Run) (runs.Run, []runs.Event, error)) (runs.Run, error) {
	op := fmt.Sprintf("update run %q", id)
	cur, cached := s.cache.Get(id)
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if !cached {
			var err error
			if cur, err = s.get(ctx, id); err != nil {
				s.cache.Drop(id)
				return runs.Run{}, err
			}
		}
		next, evs, err := apply(cur)
		if err != nil {
			if cached { // the cached copy may be stale: decide on the stored run
				cached = false
				continue
			}
			return runs.Run{}, err
		}
		err = s.commit(ctx, cur, next, evs)
		switch {
		case err == nil:
			s.cache.Put(next)
			return next, nil
		case cached && (errors.Is(err, errRetry) || errors.Is(err, runs.ErrNotFound)):
			cached = false
		case errors.Is(err, errRetry):
		default:
			s.cache.Drop(id)
			return runs.Run{}, storekit.Fail(op, err)
		}
	}
	s.cache.Drop(id)
	return runs.Run{}, fmt.Errorf("%s: %d attempts lost to concurrent writers: %w", op, maxAttempts, runs.ErrConflict)
}

// commit writes next over cur (if cur's version is still the stored one): its header and
// the steps that differ from cur's; and appends evs. A run still stored whole by an older
// build gets all its steps, in the same attempt.
func (s *Store) commit(ctx context.Context, cur, next runs.Run, evs []runs.Event) error {
	header, err := storekit.EncodeHeader(next)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	keys := []string{
		s.runKey(cur.ID), s.evKey(cur.ID),
		s.stKey(cur.Status), s.stKey(next.Status),
		s.psKey(cur.Status, cur.Pipeline), s.psKey(next.Status, cur.Pipeline),
		s.ownerKey(cur.Instance), s.ownerKey(next.Instance),
	}
	addInstance := "0"
	if next.Instance != "" && !next.Status.Terminal() {
		addInstance = "1"
	}
	var events []any
	for _, e := range evs {
		e.Seq = 0 // the list index is the seq
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("encode event: %w", err)
		}
		events = append(events, b)
	}
	run := func(steps []int, all string) (int64, error) {
		args := []any{cur.Version, header, next.Version, string(next.Status), next.Instance, storekit.SortKey(cur),
			cur.ID, s.sigChan(cur.ID), addInstance, len(next.Steps), all, len(steps)}
		for _, i := range steps {
			b, err := storekit.EncodeStep(next.Steps[i])
			if err != nil {
				return 0, fmt.Errorf("encode step %d: %w", i, err)
			}
			args = append(args, i, b)
		}
		return updateScript.Run(ctx, s.rdb, keys, append(args, events...)...).Int64()
	}
	n, err := run(storekit.ChangedSteps(cur.Steps, next.Steps), "0")
	if err == nil && n == -3 {
		n, err = run(storekit.AllSteps(next), "1")
	}
	switch {
	case err != nil:
		return err
	case n == -1:
		return runs.ErrNotFound
	case n == -2:
		return errRetry
	case n < 0:
		return fmt.Errorf("update script answered %d", n)
	}
	for i := range evs {
		evs[i].Seq = n - int64(len(evs)) + int64(i) + 1
	}
	return nil
}

//go:embed append.lua
var appendLua string

// appendScript: KEYS run, ev; ARGV signal channel, events… Returns the new event count, or
// -1 when the run does not exist.
var appendScript = redis.NewScript(appendLua)

// Append implements runs.Store.
func (s *Store) Append(ctx context.Context, id string, evs ...runs.Event) ([]runs.Event, error) {
	stamped, err := storekit.StampEvents(id, evs, s.now())
	if err != nil {
		return nil, err
	}
	op := fmt.Sprintf("append to run %q", id)
	if err := s.open(op); err != nil {
		return nil, err
	}
	args := []any{s.sigChan(id)}
	for _, e := range stamped {
		b, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("%s: encode event: %w", op, err)
		}
		args = append(args, b)
	}
	n, err := appendScript.Run(ctx, s.rdb, []string{s.runKey(id), s.evKey(id)}, args...).Int64()
	if err != nil {
		return nil, storekit.Fail(op, err)
	}
	if n < 0 {
		return nil, fmt.Errorf("%s: %w", op, runs.ErrNotFound)
	}
	for i := range stamped {
		stamped[i].Seq = n - int64(len(stamped)) + int64(i) + 1
	}
	return stamped, nil
}

// Events implements runs.Store.
func (s *Store) Events(ctx context.Context, id string, afterSeq int64, limit int) ([]runs.Event, error) {
	op := fmt.Sprintf("events of run %q", id)
	if err := s.open(op); err != nil {
		return nil, err
	}
	if afterSeq < 0 {
		afterSeq = 0
	}
	stop := int64(-1)
	if limit > 0 {
		stop = afterSeq + int64(limit) - 1
	}
	pipe := s.rdb.Pipeline()
	exists := pipe.Exists(ctx, s.runKey(id))
	rng := pipe.LRange(ctx, s.evKey(id), afterSeq, stop)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, storekit.Fail(op, err)
	}
	if exists.Val() == 0 {
		return nil, fmt.Errorf("%s: %w", op, runs.ErrNotFound)
	}
	out := make([]runs.Event, 0, len(rng.Val()))
	for i, raw := range rng.Val() {
		var e runs.Event
		if err := json.Unmarshal([]byte(raw), &e); err != nil {
			return nil, storekit.Fail(op, fmt.Errorf("decode event %d: %w", afterSeq+int64(i)+1, err))
		}
		e.Seq = afterSeq + int64(i) + 1
		out = append(out, e)
	}
	return out, nil
}

// Subscribe implements runs.Store. The first call starts the Store's pattern subscription
// (one connection for all runs) and waits until Redis confirms it.
func (s *Store) Subscribe(ctx context.Context, id string) (runs.Subscription, error) {
	op := fmt.Sprintf("subscribe to run %q", id)
	if err := s.open(op); err != nil {
		return nil, err
	}
	if err := s.listen(ctx); err != nil {
		return nil, storekit.Fail(op, err)
	}
	return s.hub.Subscribe(id), nil
}

// listen starts the pattern subscription and its forwarding goroutine once.
func (s *Store) listen(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ps != nil {
		return nil
	}
	if s.closed.Load() {
		return fmt.Errorf("%w: %w", runs.ErrUnavailable, storekit.ErrClosed)
	}
	ps := s.rdb.PSubscribe(ctx, s.k+"sig:*")
	if _, err := ps.Receive(ctx); err != nil { // the subscription confirmation
		_ = ps.Close()
		return err
	}
	s.ps = ps
	ch := ps.Channel()
	prefix := s.k + "sig:"
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for m := range ch {
			s.hub.Notify(strings.TrimPrefix(m.Channel, prefix))
		}
	}()
	return nil
}

// Unfinished implements runs.Store: an owner's from its set of unfinished runs, every
// owner's from the status index.
func (s *Store) Unfinished(ctx context.Context, instance string) ([]runs.Run, error) {
	op := fmt.Sprintf("unfinished runs of %q", instance)
	if err := s.open(op); err != nil {
		return nil, err
	}
	var out []runs.Run
	if instance == "" {
		var active []runs.Status
		for _, st := range runs.Statuses {
			if !st.Terminal() {
				active = append(active, st)
			}
		}
		f := runs.Filter{Status: active, Limit: runs.MaxLimit}
		for {
			page, err := s.List(ctx, f)
			if err != nil {
				return nil, err
			}
			out = append(out, page.Runs...)
			if page.Next == "" {
				break
			}
			f.Cursor = page.Next
		}
	} else {
		ids, err := s.rdb.SMembers(ctx, s.ownerKey(instance)).Result()
		if err != nil {
			return nil, storekit.Fail(op, err)
		}
		for _, id := range ids {
			r, err := s.get(ctx, id)
			if errors.Is(err, runs.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if !r.Status.Terminal() && r.Instance == instance {
				out = append(out, r)
			}
		}
	}
	slices.SortFunc(out, func(a, b runs.Run) int {
		return strings.Compare(storekit.SortKey(a), storekit.SortKey(b))
	})
	return out, nil
}

// SeenDelivery implements runs.Deliveries with SET NX PX.
func (s *Store) SeenDelivery(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	if id == "" || ttl <= 0 {
		return false, fmt.Errorf("seen delivery: empty id or ttl %s: %w", ttl, runs.ErrInvalid)
	}
	op := fmt.Sprintf("seen delivery %q", id)
	if err := s.open(op); err != nil {
		return false, err
	}
	fresh, err := s.rdb.SetNX(ctx, s.k+"dl:"+id, 1, ttl).Result()
	if err != nil {
		return false, storekit.Fail(op, err)
	}
	return !fresh, nil
}

// Ping implements runs.Store.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.open("ping run store"); err != nil {
		return err
	}
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return storekit.Fail("ping run store", err)
	}
	return nil
}

// Close ends the pattern subscription and every Subscription, and waits for the forwarding
// goroutine. It does not close the Redis client. Calling it again returns nil.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.mu.Lock()
	var err error
	if s.ps != nil {
		err = s.ps.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.hub.Close()
	return err
}
