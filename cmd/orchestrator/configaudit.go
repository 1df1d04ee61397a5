package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// configTarget is the target of the audit log's config records.
const configTarget = "pipelines"

// pipelineDetail prefixes a pipeline's digest in a config record's detail.
const pipelineDetail = "pipeline:"

// recordConfig appends a config record to the audit log when the pipelines this daemon
// starts with (with the environments' gates applied: approvals, deploy windows) differ from
// those the log's last config record names, so that a gate changed by editing a file and
// restarting is in the log: which pipelines were added, removed or changed, and a digest of
// each (never a value). A failure is logged: the daemon serves without it.
func recordConfig(ctx context.Context, al runs.AuditLog, instance string, pipelines map[string]*config.Pipeline, log *slog.Logger) {
	digests, err := pipelineDigests(pipelines)
	if err == nil {
		var last runs.AuditPage
		last, err = runs.NewestAudit(ctx, al, 0, func(r runs.AuditRecord) bool {
			return r.Action == runs.AuditConfig && r.Target == configTarget && r.Outcome == runs.AuditOK
		}, 1)
		var before map[string]string
		if err == nil && len(last.Records) == 1 {
			before = last.Records[0].Detail
		}
		if change := configChange(before, digests); err == nil && change != "" {
			_, err = al.AppendAudit(ctx, runs.AuditRecord{Subject: "daemon:" + instance, Action: runs.AuditConfig,
				Target: configTarget, Reason: change, Outcome: runs.AuditOK, Detail: digests})
		}
	}
	if err != nil {
		log.LogAttrs(ctx, slog.LevelError, "configuration not recorded in the audit log", slog.String(logkey.Error, err.Error()))
	}
}

// pipelineDigests is a config record's detail: per pipeline, the first 16 hex digits of the
// SHA-256 of its loaded form.
func pipelineDigests(pipelines map[string]*config.Pipeline) (map[string]string, error) {
	out := make(map[string]string, len(pipelines))
	for name, p := range pipelines {
		b, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("digest of pipeline %s: %w", name, err)
		}
		sum := sha256.Sum256(b)
		out[pipelineDetail+name] = hex.EncodeToString(sum[:8])
	}
	return out, nil
}

// configChange says how digests differ from before (a config record's detail; nil when
// the log has none): "" when they do not.
func configChange(before, digests map[string]string) string {
	if before == nil {
		return "first configuration recorded: " + names(slices.Sorted(maps.Keys(digests)))
	}
	var added, removed, changed []string
	for k, d := range digests {
		switch old, ok := before[k]; {
		case !ok:
			added = append(added, k)
		case old != d:
			changed = append(changed, k)
		}
	}
	for k := range before {
		if _, ok := digests[k]; !ok && strings.HasPrefix(k, pipelineDetail) {
			removed = append(removed, k)
		}
	}
	var parts []string
	for _, p := range []struct {
		what string
		keys []string
	}{{"changed", changed}, {"added", added}, {"removed", removed}} {
		if len(p.keys) > 0 {
			slices.Sort(p.keys)
			parts = append(parts, p.what+" "+names(p.keys))
		}
	}
	return strings.Join(parts, "; ")
}

// names lists detail keys as pipeline names.
func names(keys []string) string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = strings.TrimPrefix(k, pipelineDetail)
	}
	return strings.Join(out, ", ")
}
