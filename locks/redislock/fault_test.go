package redislock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/ctxtime"
	"github.com/deploy-orchestrator/orchestrator/internal/faultproxy"
	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/locks"
)

// The fault-injection check: 8 clients, each with its own connection pool and Driver, take
// two keys through a TCP proxy that delays, cuts and resets their connections, while
// redis-server is restarted (empty) once. Every client records when it believed it held a
// key; porcupine then checks that history against a model in which at most one client
// holds a key at a time.
//
// A client believes its lease valid from the return of the grant until the first of: the
// call of its release, the renewal that reported the lease gone, or the local expiry
// estimate (the call time of the grant or last successful renewal, plus the TTL, minus a
// safety margin). Since Redis starts the TTL after the call was sent and both clocks run
// at the same rate, the estimate ends before Redis' expiry. The restart is a loss of every
// lease held then (Redis keeps nothing on disk): in the model it frees the key and the
// holders' later ends are accepted. Fences must still grow across it.

const (
	faultClients = 8
	faultTTL     = 300 * time.Millisecond
	faultMargin  = 50 * time.Millisecond
)

var faultKeys = []string{"coolify:k0", "coolify:k1"}

type opKind int

const (
	opAcquire opKind = iota
	opEnd
	opReset
)

type lockInput struct {
	Kind   opKind
	Key    string
	Client int
	Fence  int64
}

// lockState is one key's state in the model: the believing holder (-1 for none) and the
// clients whose lease was lost with the restart and who have not noticed yet.
type lockState struct {
	Holder  int
	Orphans uint32
}

var lockModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := make(map[string][]porcupine.Operation)
		var resets []porcupine.Operation
		for _, op := range history {
			in := op.Input.(lockInput)
			if in.Kind == opReset {
				resets = append(resets, op)
				continue
			}
			byKey[in.Key] = append(byKey[in.Key], op)
		}
		out := make([][]porcupine.Operation, 0, len(byKey))
		for _, ops := range byKey {
			out = append(out, append(ops, resets...))
		}
		return out
	},
	Init: func() any { return lockState{Holder: -1} },
	Step: func(state, input, _ any) (bool, any) {
		s, in := state.(lockState), input.(lockInput)
		switch in.Kind {
		case opAcquire:
			if s.Holder != -1 {
				return false, s
			}
			return true, lockState{Holder: in.Client, Orphans: s.Orphans}
		case opEnd:
			if s.Holder == in.Client {
				return true, lockState{Holder: -1, Orphans: s.Orphans}
			}
			if bit := uint32(1) << in.Client; s.Orphans&bit != 0 {
				return true, lockState{Holder: s.Holder, Orphans: s.Orphans &^ bit}
			}
			return false, s
		default: // opReset
			if s.Holder == -1 {
				return true, s
			}
			return true, lockState{Holder: -1, Orphans: s.Orphans | 1<<s.Holder}
		}
	},
	DescribeOperation: func(input, _ any) string {
		in := input.(lockInput)
		switch in.Kind {
		case opAcquire:
			return fmt.Sprintf("c%d acquires %s (fence %d)", in.Client, in.Key, in.Fence)
		case opEnd:
			return fmt.Sprintf("c%d stops believing in %s", in.Client, in.Key)
		}
		return "redis restart"
	},
	DescribeState: func(state any) string {
		s := state.(lockState)
		return fmt.Sprintf("holder c%d, orphans %b", s.Holder, s.Orphans)
	},
}

// history collects operations from every client, in nanoseconds since start.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) add(client int, in lockInput, call, ret int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Return: ret})
}

func TestFaultInjectionMutualExclusion(t *testing.T) {
	sc := runFaultScenario(t, false, 12*time.Second, 1, faultClient)
	sc.requireGrantAfterRestart(t)
	if sc.res != porcupine.Ok {
		t.Fatalf("porcupine: %s over %d operations, want ok: two clients believed they held one key at once", sc.res, sc.ops)
	}
}

// TestFaultInjectionCatchesPlainDelete is the negative twin: with the compare-and-delete
// release replaced by a plain DEL, a late release deletes the next holder's lease and the
// check must find two believing holders.
//
// The overlap needs a late release to land while another client holds the key and a third
// to take it before that hold ends; the faults are random, so a slow machine can go through
// one 5 s scenario without it (CI once did: 67 operations, 33 grants). The scenario is run
// again, up to plainDeleteRounds times, until the check finds the overlap. A round is not
// required to grant anything after its restart (CI once went through the 2.5 s after it
// without a grant): what it must find is the overlap, wherever it falls; the fence checks
// apply to the grants there are.
func TestFaultInjectionCatchesPlainDelete(t *testing.T) {
	const plainDeleteRounds = 4
	for round := 1; round <= plainDeleteRounds; round++ {
		sc := runFaultScenario(t, true, 5*time.Second, 1, faultClient)
		if sc.res == porcupine.Illegal {
			return
		}
		t.Logf("round %d: porcupine: %s over %d operations, %d grants after the restart", round, sc.res, sc.ops, sc.grantsAfterRestart)
	}
	t.Fatalf("porcupine found no overlap in %d scenarios, want illegal: the plain-DEL release went unnoticed", plainDeleteRounds)
}

// TestFaultInjectionLeases puts the product's own Lease in the history: each client is a
// locks.Locker over its Driver, and believes it holds a key while the Lease's Err says so —
// the Locker's own decision, with its TTL/20 safety margin, heartbeat and late-grant rule,
// instead of the test's estimate above (see leaseClient for when it looks). Each
// client has a proxy of its own, so one can be cut off or slowed down while the others reach
// Redis (as one daemon's network failing), and take over a lease it cannot renew.
func TestFaultInjectionLeases(t *testing.T) {
	sc := runFaultScenario(t, false, 12*time.Second, faultClients, leaseClient)
	sc.requireGrantAfterRestart(t)
	if sc.res != porcupine.Ok {
		t.Fatalf("porcupine: %s over %d operations, want ok: two Leases were held on one key at once", sc.res, sc.ops)
	}
}

// A faultClientFunc takes keys until ctx ends, recording in h when it believed it held them.
type faultClientFunc func(ctx context.Context, id int, d *Driver, h *history)

// scenario is what runFaultScenario found.
type scenario struct {
	res                porcupine.CheckResult
	ops                int // operations in the history
	grantsAfterRestart int // grants asked for after Redis came back
}

// requireGrantAfterRestart fails the test when nothing was granted after the restart: the
// fences after it went unchecked.
func (sc scenario) requireGrantAfterRestart(t *testing.T) {
	t.Helper()
	if sc.grantsAfterRestart == 0 {
		t.Fatal("no grant after the restart")
	}
}

// runFaultScenario runs clientFn for every client, through nproxies fault proxies (client c
// uses proxy c mod nproxies; each tick's fault hits one proxy drawn at random).
func runFaultScenario(t *testing.T, unsafeDel bool, duration time.Duration, nproxies int, clientFn faultClientFunc) scenario {
	srv := redistest.Start(t)
	proxies := make([]*faultproxy.Proxy, nproxies)
	for i := range proxies {
		p, err := faultproxy.Start(srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		proxies[i] = p
	}

	h := &history{start: time.Now()}
	ctx, cancel := context.WithTimeout(t.Context(), duration)
	defer cancel()

	var wg sync.WaitGroup
	var restartOp struct{ call, ret int64 }
	ready := make(chan struct{})
	for c := range faultClients {
		client := redis.NewClient(&redis.Options{
			Addr:         proxies[c%nproxies].Addr(),
			DialTimeout:  200 * time.Millisecond,
			ReadTimeout:  150 * time.Millisecond,
			WriteTimeout: 150 * time.Millisecond,
			PoolSize:     4,
			// As New requires (and Open does): a context deadline bounds every call, so a
			// Lease's renewal returns by its local deadline.
			ContextTimeoutEnabled: true,
		})
		d := New(client, Options{Prefix: "fault:"})
		d.unsafeDelRelease = unsafeDel
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer client.Close()
			defer d.Close()
			<-ready
			clientFn(ctx, c, d, h)
		}()
	}
	close(ready)

	// The faults: every 250 ms a new network condition, and one restart halfway.
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	tick := time.NewTicker(250 * time.Millisecond)
	restartAt := time.After(duration / 2)
	restarted := false
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-restartAt:
			restartOp.call = h.now()
			srv.Restart()
			restartOp.ret = h.now()
			restarted = true
		case <-tick.C:
			// With one proxy it gets the tick's fault; with one per client, each draws its own,
			// so some clients lose Redis while others reach it.
			for _, proxy := range proxies {
				switch rng.IntN(6) {
				case 0, 1:
					proxy.SetDelay(0)
				case 2:
					proxy.SetDelay(time.Duration(10+rng.IntN(90)) * time.Millisecond)
				case 3:
					proxy.SetDelay(400 * time.Millisecond) // longer than a lease: renewals fail
				case 4:
					proxy.Cut()
				case 5:
					proxy.Reset()
				}
			}
		}
	}
	tick.Stop()
	for _, p := range proxies {
		p.SetDelay(0)
	}
	wg.Wait()
	if !restarted {
		t.Fatal("the scenario ended before the restart")
	}
	h.add(-1, lockInput{Kind: opReset}, restartOp.call, restartOp.ret)

	after := checkFences(t, h.ops, restartOp.call, restartOp.ret)
	var acquires int
	for _, op := range h.ops {
		if op.Input.(lockInput).Kind == opAcquire {
			acquires++
		}
	}
	if acquires < 20 {
		t.Fatalf("only %d grants in the history: too few to check anything", acquires)
	}
	t.Logf("%d operations, %d grants", len(h.ops), acquires)

	res, info := porcupine.CheckOperationsVerbose(lockModel, h.ops, 20*time.Second)
	if res == porcupine.Illegal && os.Getenv("FAULT_VIZ") != "" {
		path := filepath.Join(os.Getenv("FAULT_VIZ"), t.Name()+".html")
		if err := porcupine.VisualizePath(lockModel, info, path); err == nil {
			t.Logf("visualization: %s", path)
		}
	}
	return scenario{res: res, ops: len(h.ops), grantsAfterRestart: after}
}

// checkFences asserts that fences are unique per key, and that every fence granted after
// the restart is above every fence granted before it. It returns how many grants were asked
// for after the restart.
func checkFences(t *testing.T, ops []porcupine.Operation, restartCall, restartRet int64) int {
	t.Helper()
	seen := make(map[string]map[int64]bool)
	maxBefore := make(map[string]int64)
	type grant struct {
		key   string
		fence int64
	}
	var after []grant
	for _, op := range ops {
		in := op.Input.(lockInput)
		if in.Kind != opAcquire {
			continue
		}
		if seen[in.Key] == nil {
			seen[in.Key] = make(map[int64]bool)
		}
		if seen[in.Key][in.Fence] {
			t.Errorf("fence %d of %s granted twice", in.Fence, in.Key)
		}
		seen[in.Key][in.Fence] = true
		switch {
		case op.Return < restartCall:
			maxBefore[in.Key] = max(maxBefore[in.Key], in.Fence)
		case op.Call > restartRet:
			after = append(after, grant{in.Key, in.Fence})
		}
	}
	for _, g := range after {
		if g.fence <= maxBefore[g.key] {
			t.Errorf("fence %d of %s after the restart is not above %d from before it", g.fence, g.key, maxBefore[g.key])
		}
	}
	return len(after)
}

// faultClient takes random keys until ctx ends, recording what it believed.
func faultClient(ctx context.Context, id int, d *Driver, h *history) {
	rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	subs := make(map[string]locks.Subscription)
	defer func() {
		for _, s := range subs {
			_ = s.Close()
		}
	}()
	for round := 0; ctx.Err() == nil; round++ {
		key := faultKeys[rng.IntN(len(faultKeys))]
		if subs[key] == nil {
			sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			if s, err := d.Subscribe(sctx, key); err == nil {
				subs[key] = s
			}
			cancel()
		}
		token := fmt.Sprintf("tok-%d-%d", id, round)
		g := locks.Grant{Key: key, Token: token, Holder: fmt.Sprintf("c%d#%d/x", id, round), TTL: faultTTL,
			Ticket: fmt.Sprintf("q-%d-%d", id, round)}

		// Wait for the key: retry on a release signal or after a short pause.
		var info locks.Info
		var call int64
		for {
			g.TicketDeadline = time.Now().Add(time.Second)
			call = h.now()
			var err error
			info, err = d.TryAcquire(ctx, g)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			var wake <-chan struct{}
			if s := subs[key]; s != nil {
				wake = s.C()
			}
			select {
			case <-ctx.Done():
				return
			case <-wake:
			case <-time.After(time.Duration(2+rng.IntN(20)) * time.Millisecond):
			}
		}
		ret := h.now()
		deadline := call + int64(faultTTL-faultMargin)
		if ret >= deadline {
			// Granted, but too late to be believed: give it back.
			_ = d.Release(context.WithoutCancel(ctx), key, token)
			continue
		}
		h.add(id, lockInput{Kind: opAcquire, Key: key, Client: id, Fence: info.Fence}, call, ret)
		end := func(at int64) { h.add(id, lockInput{Kind: opEnd, Key: key, Client: id}, at, at) }

		switch p := rng.IntN(100); {
		case p < 70: // a short hold, then release
			_ = ctxtime.Sleep(ctx, time.Duration(1+rng.IntN(30))*time.Millisecond)
		case p < 85: // a longer hold kept alive by a renewal
			_ = ctxtime.Sleep(ctx, 120*time.Millisecond)
			rc := h.now()
			if rc >= deadline {
				break // already past the local expiry: no longer believed
			}
			if _, err := d.Renew(ctx, key, token, faultTTL); err == nil {
				deadline = rc + int64(faultTTL-faultMargin)
			} else if errors.Is(err, locks.ErrNotHeld) {
				deadline = min(deadline, h.now())
			}
			_ = ctxtime.Sleep(ctx, time.Duration(1+rng.IntN(60))*time.Millisecond)
		default: // a pause longer than the lease (a stalled process), then a late release
			_ = ctxtime.Sleep(ctx, faultTTL+time.Duration(20+rng.IntN(80))*time.Millisecond)
		}
		rel := h.now()
		end(min(rel, deadline))
		if ctx.Err() != nil {
			return
		}
		_ = d.Release(ctx, key, token)
	}
}

// leaseClient takes random keys through a Locker until ctx ends, recording what its Leases
// said. A holder believes what Err says when it looks, as work under a lease checks it
// between steps: it looks right after Acquire returns, every faultCheckEvery while it holds
// the key, at once when Done closes, and when the hold is over. The belief ends after the
// last look that found the lease held (from that look's start on: the look itself may be
// late, never early) and before the first that found it ended, or the call of Release.
// A wake-up delayed by a busy CPU thus widens the recorded interval instead of moving the
// end past what the Lease said.
func leaseClient(ctx context.Context, id int, d *Driver, h *history) {
	l := locks.New(d, locks.Options{PollInterval: 50 * time.Millisecond, LockDelay: time.Millisecond})
	defer l.Close()
	if err := l.RegisterNamespace("coolify:"); err != nil {
		panic(err) // a fresh Locker: cannot happen
	}
	rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	for round := 0; ctx.Err() == nil; round++ {
		key := faultKeys[rng.IntN(len(faultKeys))]
		call := h.now()
		le, err := l.Acquire(ctx, locks.Request{Key: key, Holder: fmt.Sprintf("c%d#%d/x", id, round), TTL: faultTTL,
			Budget: locks.Budget{Timeout: 2 * time.Second}})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			_ = ctxtime.Sleep(ctx, time.Duration(2+rng.IntN(20))*time.Millisecond)
			continue
		}
		h.add(id, lockInput{Kind: opAcquire, Key: key, Client: id, Fence: le.Fence()}, call, h.now())
		var hold time.Duration
		switch p := rng.IntN(100); {
		case p < 70:
			hold = time.Duration(1+rng.IntN(30)) * time.Millisecond
		default: // longer than the TTL: only the heartbeat keeps it
			hold = faultTTL + time.Duration(50+rng.IntN(300))*time.Millisecond
		}
		endCall, endRet := holdLease(ctx, le, hold, call, h)
		h.add(id, lockInput{Kind: opEnd, Key: key, Client: id}, endCall, endRet)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = le.Release(rctx)
		cancel()
	}
}

// faultCheckEvery is how often a leaseClient looks at a lease it holds.
const faultCheckEvery = 5 * time.Millisecond

// holdLease holds le for hold (or until ctx ends), looking at its Err as leaseClient
// describes, and returns the interval in which the belief in it ended. heldSince is a time
// the lease was held at or after (Acquire's call).
func holdLease(ctx context.Context, le *locks.Lease, hold time.Duration, heldSince int64, h *history) (int64, int64) {
	timer := time.NewTimer(hold)
	defer timer.Stop()
	tick := time.NewTicker(faultCheckEvery)
	defer tick.Stop()
	lastHeld := heldSince
	for {
		at := h.now()
		if le.Err() != nil {
			return lastHeld, h.now() // ended between the last look that found it held and this one
		}
		lastHeld = at
		select {
		case <-le.Done():
		case <-tick.C:
		case <-timer.C:
			return lastHeld, h.now() // held at the last look; the holder now calls Release
		case <-ctx.Done():
			return lastHeld, h.now()
		}
	}
}
