package redisstore

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Reports to Git hosts (runs.ReportStore), below the store's prefix and hash tag like every
// key of the store:
//
//	P{runs}:rpt:<key>        hash: j (the report's fixed part as JSON: key, host, run, pipeline,
//	                         deployment), crt and upd (created, updated: Unix ns), hid, sent,
//	                         att, nb (NotBefore, Unix ns, "" for none), err, own (the claim's
//	                         owner, "" for none), exp (the claim's expiry, Unix ms)
//	P{runs}:rpts:<key>       list of the report's states (ReportState JSON), appended with RPUSH
//	P{runs}:rptdue           sorted set of the keys of the reports that are pending, scored with
//	                         when they are due (Unix ms): since a new state, NotBefore, or while
//	                         claimed the claim's expiry, so an expired claim is due again by itself
//	P{runs}:rptrun:<run id>  set of the run's report keys
//	P{runs}:rptruns          set of the IDs of the runs that have reports (Prune walks it)
//	P{runs}:rptscope         hash: scope → the key of its latest report
//
// Every step that reads and writes is one script, on the server's clock (TIME).

func (d *driver) reportKey(key string) string   { return d.k + "rpt:" + key }
func (d *driver) reportStKey(key string) string { return d.k + "rpts:" + key }
func (d *driver) reportDueKey() string          { return d.k + "rptdue" }
func (d *driver) runReportsKey(id string) string {
	return d.k + "rptrun:" + id
}
func (d *driver) reportRunsKey() string   { return d.k + "rptruns" }
func (d *driver) reportScopesKey() string { return d.k + "rptscope" }

// reportKeys are the hash and the states list of each report in keys, in turn.
func (d *driver) reportKeys(keys []string) []string {
	out := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		out = append(out, d.reportKey(k), d.reportStKey(k))
	}
	return out
}

// luaReportPrelude reads the server's clock, now (ms) and nowNS (ns, a string: a Lua number
// cannot hold it exactly), and names the hash fields a read answers, in decodeReport's order.
const luaReportPrelude = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nowNS = t[1] .. string.format('%06d', tonumber(t[2])) .. '000'
local reportFields = {'j', 'crt', 'upd', 'hid', 'sent', 'att', 'nb', 'err'}
`

var (
	//go:embed reportadd.lua
	reportAddLua string
	//go:embed reportclaim.lua
	reportClaimLua string
	//go:embed reportsave.lua
	reportSaveLua string
	//go:embed reportget.lua
	reportGetLua string
	//go:embed reportswap.lua
	reportSwapLua string
	//go:embed reportprune.lua
	reportPruneLua string
	//go:embed reportscope.lua
	reportScopeLua string
	//go:embed reportrelease.lua
	reportReleaseLua string

	reportAddScript     = redis.NewScript(luaReportPrelude + reportAddLua)
	reportClaimScript   = redis.NewScript(luaReportPrelude + reportClaimLua)
	reportSaveScript    = redis.NewScript(luaReportPrelude + reportSaveLua)
	reportGetScript     = redis.NewScript(luaReportPrelude + reportGetLua)
	reportSwapScript    = redis.NewScript(reportSwapLua)
	reportPruneScript   = redis.NewScript(reportPruneLua)
	reportScopeScript   = redis.NewScript(reportScopeLua)
	reportReleaseScript = redis.NewScript(luaReportPrelude + reportReleaseLua)
)

var _ runs.ReportStore = (*Store)(nil)

// AddReportState implements runs.ReportStore: one script creates the report when it is not
// there, appends the state and makes it due.
func (s *Store) AddReportState(ctx context.Context, seed runs.Report, st runs.ReportState) error {
	if err := runs.CheckReportSeed(seed); err != nil {
		return err
	}
	op := fmt.Sprintf("add report state to %q", seed.Key)
	if err := s.d.open(op); err != nil {
		return err
	}
	fixed, err := json.Marshal(runs.Report{Key: seed.Key, Host: seed.Host, RunID: seed.RunID,
		Pipeline: seed.Pipeline, Deployment: seed.Deployment})
	if err != nil {
		return fmt.Errorf("%s: encode: %w", op, err)
	}
	state, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("%s: encode the state: %w", op, err)
	}
	keys := []string{s.d.reportKey(seed.Key), s.d.reportStKey(seed.Key), s.d.reportDueKey(),
		s.d.runReportsKey(seed.RunID), s.d.reportRunsKey()}
	if err := reportAddScript.Run(ctx, s.d.rdb, keys, seed.Key, fixed, state, seed.RunID).Err(); err != nil {
		return runs.Fail(op, err)
	}
	return nil
}

// ClaimReports implements runs.ReportStore: it reads the first keys of the due set (the
// oldest due, the not yet due after them), twice as many as limit so that another owner
// claiming at the same moment leaves some, and one script claims those still due.
func (s *Store) ClaimReports(ctx context.Context, owner string, lease time.Duration, limit int) ([]runs.Report, error) {
	if err := runs.CheckReportClaim(owner, lease, limit); err != nil {
		return nil, err
	}
	const op = "claim reports"
	if err := s.d.open(op); err != nil {
		return nil, err
	}
	cands, err := s.d.rdb.ZRange(ctx, s.d.reportDueKey(), 0, int64(2*limit-1)).Result()
	if err != nil {
		return nil, runs.Fail(op, err)
	}
	if len(cands) == 0 {
		return nil, nil
	}
	keys := append([]string{s.d.reportDueKey()}, s.d.reportKeys(cands)...)
	args := []any{owner, max(1, (lease + time.Millisecond - 1).Milliseconds()), limit}
	for _, c := range cands {
		args = append(args, c)
	}
	res, err := reportClaimScript.Run(ctx, s.d.rdb, keys, args...).Slice()
	if err != nil {
		return nil, runs.Fail(op, err)
	}
	out := make([]runs.Report, 0, len(res))
	for _, v := range res {
		claimed, _ := v.([]any)
		if len(claimed) != 3 {
			return nil, runs.Fail(op, fmt.Errorf("a claim answered %v", v))
		}
		key, _ := claimed[0].(string)
		r, ok, err := decodeReport(key, claimed[1], claimed[2])
		if err == nil && !ok {
			err = fmt.Errorf("report %q claimed without its fields", key)
		}
		if err != nil {
			return nil, runs.Fail(op, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// ReleaseClaims implements runs.ReportStore: the reports not due now (claimed, or waiting
// for their NotBefore) are read, and one script releases those owner claims.
func (s *Store) ReleaseClaims(ctx context.Context, owner string) (int, error) {
	if owner == "" {
		return 0, fmt.Errorf("release claims: no owner: %w", runs.ErrInvalid)
	}
	const op = "release claims"
	if err := s.d.open(op); err != nil {
		return 0, err
	}
	cands, err := s.d.rdb.ZRangeByScore(ctx, s.d.reportDueKey(), &redis.ZRangeBy{Min: "-inf", Max: "+inf"}).Result()
	if err != nil {
		return 0, runs.Fail(op, err)
	}
	if len(cands) == 0 {
		return 0, nil
	}
	keys := append([]string{s.d.reportDueKey()}, s.d.reportKeys(cands)...)
	args := []any{owner}
	for _, c := range cands {
		args = append(args, c)
	}
	n, err := reportReleaseScript.Run(ctx, s.d.rdb, keys, args...).Int()
	if err != nil {
		return 0, runs.Fail(op, err)
	}
	return n, nil
}

// SaveReport implements runs.ReportStore: one script checks the claim and the count sent,
// writes the progress and moves the report in the due set.
func (s *Store) SaveReport(ctx context.Context, owner string, r runs.Report) error {
	if err := runs.CheckReportSave(owner, r); err != nil {
		return err
	}
	op := fmt.Sprintf("save report %q", r.Key)
	if err := s.d.open(op); err != nil {
		return err
	}
	nbNS, nbMS := "", int64(0)
	if !r.NotBefore.IsZero() {
		ns := r.NotBefore.UnixNano()
		nbNS, nbMS = strconv.FormatInt(ns, 10), (ns+int64(time.Millisecond)-1)/int64(time.Millisecond)
	}
	keys := []string{s.d.reportKey(r.Key), s.d.reportStKey(r.Key), s.d.reportDueKey()}
	res, err := reportSaveScript.Run(ctx, s.d.rdb, keys, r.Key, owner, r.HostID, r.Sent, r.Attempts, nbNS, nbMS, r.LastError).Slice()
	if err != nil {
		return runs.Fail(op, err)
	}
	switch code, _ := res[0].(int64); code {
	case 1:
		return nil
	case -1:
		return fmt.Errorf("%s: no such report: %w", op, runs.ErrNotFound)
	case -2:
		own, _ := res[1].(string)
		return fmt.Errorf("%s for %q: claimed by %q: %w", op, owner, own, runs.ErrNotClaimed)
	default:
		sent, _ := res[1].(int64)
		states, _ := res[2].(int64)
		return runs.CheckReportSent(r.Key, r.Sent, int(sent), int(states))
	}
}

// Reports implements runs.ReportStore: the run's set, then its reports in one script.
func (s *Store) Reports(ctx context.Context, runID string) ([]runs.Report, error) {
	if runID == "" {
		return nil, fmt.Errorf("reports: empty run id: %w", runs.ErrInvalid)
	}
	op := fmt.Sprintf("reports of run %q", runID)
	if err := s.d.open(op); err != nil {
		return nil, err
	}
	keys, err := s.d.rdb.SMembers(ctx, s.d.runReportsKey(runID)).Result()
	if err != nil {
		return nil, runs.Fail(op, err)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	slices.Sort(keys)
	res, err := reportGetScript.Run(ctx, s.d.rdb, s.d.reportKeys(keys)).Slice()
	if err != nil {
		return nil, runs.Fail(op, err)
	}
	var out []runs.Report
	for i, v := range res {
		got, _ := v.([]any)
		if len(got) != 2 {
			return nil, runs.Fail(op, fmt.Errorf("a read answered %v", v))
		}
		r, ok, err := decodeReport(keys[i], got[0], got[1])
		if err != nil {
			return nil, runs.Fail(op, err)
		}
		if ok { // else pruned since the set was read
			out = append(out, r)
		}
	}
	return out, nil
}

// SwapLatestReport implements runs.ReportStore: one script reads and writes the scope's
// field.
func (s *Store) SwapLatestReport(ctx context.Context, scope, key string) (string, error) {
	if err := runs.CheckReportSwap(scope, key); err != nil {
		return "", err
	}
	op := fmt.Sprintf("swap latest report of %q", scope)
	if err := s.d.open(op); err != nil {
		return "", err
	}
	prev, err := reportSwapScript.Run(ctx, s.d.rdb, []string{s.d.reportScopesKey()}, scope, key).Text()
	if err != nil {
		return "", runs.Fail(op, err)
	}
	return prev, nil
}

// decodeReport turns a script's answer for the report key (its fields, in reportFields'
// order, and its states) into the report; ok is false when the report is gone.
func decodeReport(key string, fields, states any) (r runs.Report, ok bool, err error) {
	f, _ := fields.([]any)
	if len(f) != 8 {
		return r, false, fmt.Errorf("report %q: %d fields", key, len(f))
	}
	str := make([]string, len(f))
	for i, v := range f {
		str[i], _ = v.(string)
	}
	if f[0] == nil {
		return r, false, nil
	}
	if err := json.Unmarshal([]byte(str[0]), &r); err != nil {
		return r, false, fmt.Errorf("decode report %q: %w", key, err)
	}
	r.HostID, r.LastError = str[3], str[7]
	var errs []error
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		errs = append(errs, err)
		return n
	}
	r.Created, r.Updated = time.Unix(0, num(str[1])).UTC(), time.Unix(0, num(str[2])).UTC()
	r.Sent, r.Attempts = int(num(str[4])), int(num(str[5]))
	if str[6] != "" {
		r.NotBefore = time.Unix(0, num(str[6])).UTC()
	}
	if err := errors.Join(errs...); err != nil {
		return r, false, fmt.Errorf("decode report %q: %w", key, err)
	}
	list, _ := states.([]any)
	r.States = make([]runs.ReportState, len(list))
	for i, v := range list {
		data, _ := v.(string)
		if err := json.Unmarshal([]byte(data), &r.States[i]); err != nil {
			return r, false, fmt.Errorf("decode state %d of report %q: %w", i, key, err)
		}
	}
	return r, true, nil
}

// pruneReports deletes the reports that have nothing pending and whose run is gone (pruned
// now, or earlier while a report was pending), a script per run, walking the set of runs
// that have reports a page at a time; then the scope pointers whose report is gone.
func (d *driver) pruneReports(ctx context.Context) error {
	var cursor uint64
	for {
		ids, next, err := d.rdb.SScan(ctx, d.reportRunsKey(), cursor, "", runs.PruneBatch).Result()
		if err != nil {
			return err
		}
		if err := d.pruneRunReports(ctx, ids); err != nil {
			return err
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	return d.pruneScopes(ctx)
}

// pruneRunReports deletes the reports with nothing pending of those runs of ids that are gone.
func (d *driver) pruneRunReports(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	pipe := d.rdb.Pipeline()
	exists := make([]*redis.IntCmd, len(ids))
	for i, id := range ids {
		exists[i] = pipe.Exists(ctx, d.runKey(id))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	pipe = d.rdb.Pipeline()
	var gone []string
	var members []*redis.StringSliceCmd
	for i, id := range ids {
		if exists[i].Val() == 0 {
			gone = append(gone, id)
			members = append(members, pipe.SMembers(ctx, d.runReportsKey(id)))
		}
	}
	if len(gone) == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	if err := reportPruneScript.Load(ctx, d.rdb).Err(); err != nil {
		return err
	}
	pipe = d.rdb.Pipeline()
	for i, id := range gone {
		keys := append([]string{d.reportRunsKey(), d.runReportsKey(id), d.reportDueKey(), d.runKey(id)},
			d.reportKeys(members[i].Val())...)
		args := []any{id}
		for _, k := range members[i].Val() {
			args = append(args, k)
		}
		reportPruneScript.EvalSha(ctx, pipe, keys, args...)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// pruneScopes drops the latest-report pointers that name a report that is gone.
func (d *driver) pruneScopes(ctx context.Context) error {
	scopes, err := d.rdb.HGetAll(ctx, d.reportScopesKey()).Result()
	if err != nil || len(scopes) == 0 {
		return err
	}
	pipe := d.rdb.Pipeline()
	exists := map[string]*redis.IntCmd{}
	for scope, key := range scopes {
		exists[scope] = pipe.Exists(ctx, d.reportKey(key))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	for scope, key := range scopes {
		if exists[scope].Val() == 1 {
			continue
		}
		err := reportScopeScript.Run(ctx, d.rdb, []string{d.reportScopesKey(), d.reportKey(key)}, scope, key).Err()
		if err != nil {
			return err
		}
	}
	return nil
}
