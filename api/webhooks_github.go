package api

import (
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"

	"github.com/deploy-orchestrator/orchestrator"
)

// GitHub's parse step (parseGitHub) and the digest its runs are keyed on (githubEventSum).

// githubWorkflowRun is the part of a GitHub workflow_run delivery the daemon reads.
type githubWorkflowRun struct {
	Action      string `json:"action"`
	WorkflowRun *struct {
		Name       string `json:"name"`
		HeadBranch string `json:"head_branch"`
		HeadSHA    string `json:"head_sha"`
		RunNumber  int64  `json:"run_number"`
		Event      string `json:"event"`
		Status     string `json:"status"`
		Conclusion string `json:"conclusion"`
		Path       string `json:"path"`
		// HTMLURL is the workflow run's page; Actor the user who started it (TriggeringActor the
		// one who re-ran it, when someone did).
		HTMLURL         string      `json:"html_url"`
		Actor           *githubUser `json:"actor"`
		TriggeringActor *githubUser `json:"triggering_actor"`
		// HeadRepository is where the run's code came from: another repository's (a fork's
		// pull request) never deploys.
		HeadRepository *githubRepo `json:"head_repository"`
	} `json:"workflow_run"`
	Repository githubRepo `json:"repository"`
}

// githubPush is the part of a GitHub push delivery the daemon reads.
type githubPush struct {
	Ref        string     `json:"ref"`
	After      string     `json:"after"`
	Deleted    bool       `json:"deleted"`
	Repository githubRepo `json:"repository"`
	// Compare is the page of the pushed commits; Sender the user who pushed.
	Compare string      `json:"compare"`
	Sender  *githubUser `json:"sender"`
}

type githubRepo struct {
	FullName string `json:"full_name"`
	HTMLURL  string `json:"html_url"`
}

type githubUser struct {
	Login string `json:"login"`
}

// login is the user's login, "" for none.
func (u *githubUser) login() string {
	if u == nil {
		return ""
	}
	return u.Login
}

// githubOrigin is what a GitHub delivery says asked for the run: repo, commit page, job
// page and actor (the webhook step adds the provider, the delivery and cleans it).
func githubOrigin(repo githubRepo, ref, commit, job, actor string) orchestrator.Origin {
	o := orchestrator.Origin{Repo: repo.FullName, JobURL: job, Actor: actor}
	if b, ok := strings.CutPrefix(ref, "refs/tags/"); ok {
		o.Ref, o.Tag = b, true
	} else {
		o.Ref = strings.TrimPrefix(ref, "refs/heads/")
	}
	if repo.HTMLURL != "" && commit != "" {
		o.CommitURL = strings.TrimSuffix(repo.HTMLURL, "/") + "/commit/" + commit
	}
	return o
}

func parseGitHub(event string, body []byte) (ciEvent, error) {
	switch event {
	case "ping":
		return ciEvent{Event: event, Ignore: "ping: the webhook is set up"}, nil
	case "workflow_run":
		var p githubWorkflowRun
		if err := decodeLenient(body, &p); err != nil {
			return ciEvent{}, err
		}
		if p.WorkflowRun == nil {
			return ciEvent{}, fieldErr("workflow_run", "missing from a workflow_run delivery")
		}
		wr := p.WorkflowRun
		// head_branch is a branch name, taken as it is (never stripped of refs/heads/).
		ev := ciEvent{
			Event: event, Repository: p.Repository.FullName, Branch: wr.HeadBranch, Workflow: wr.Name, Source: wr.Event,
			Trigger: orchestrator.Trigger{Build: strconv.FormatInt(wr.RunNumber, 10), Commit: wr.HeadSHA,
				Origin: githubOrigin(p.Repository, wr.HeadBranch, wr.HeadSHA, wr.HTMLURL, cmp.Or(wr.TriggeringActor.login(), wr.Actor.login()))},
		}
		switch {
		case p.Action != "completed":
			ev.Ignore = fmt.Sprintf("workflow_run action %q: only completed runs deploy", truncate(p.Action, 32))
		case wr.Conclusion != "success":
			ev.Ignore = fmt.Sprintf("workflow_run concluded %q: only successful runs deploy", truncate(wr.Conclusion, 32))
		case wr.HeadRepository == nil || !strings.EqualFold(wr.HeadRepository.FullName, p.Repository.FullName):
			head := "none"
			if wr.HeadRepository != nil {
				head = fmt.Sprintf("%q", truncate(wr.HeadRepository.FullName, 128))
			}
			ev.Ignore = fmt.Sprintf("workflow_run head_repository %s is not the repository %q: runs of another repository's code (a fork's pull request) never deploy",
				head, truncate(p.Repository.FullName, 128))
		}
		return ev, nil
	case "push":
		var p githubPush
		if err := decodeLenient(body, &p); err != nil {
			return ciEvent{}, err
		}
		if p.Ref == "" {
			return ciEvent{}, fieldErr("ref", "missing from a push delivery")
		}
		ev := ciEvent{Event: event, Repository: p.Repository.FullName, Source: "push",
			Branch: branchOfRef(p.Ref), Trigger: orchestrator.Trigger{Commit: p.After,
				Origin: githubOrigin(p.Repository, p.Ref, p.After, p.Compare, p.Sender.login())}}
		if p.Deleted {
			ev.Ignore = "push deleted the ref: nothing to deploy"
		}
		return ev, nil
	case "":
		return ciEvent{}, &httpError{status: http.StatusBadRequest, code: "invalid", field: headerGitHubEvent, message: "missing " + headerGitHubEvent}
	}
	return ciEvent{Event: event, Ignore: fmt.Sprintf("GitHub event %q is not a deploy signal (workflow_run and push are)", truncate(event, 64))}, nil
}

// branchOfRef returns the branch a push's ref names: the ref without its one "refs/heads/"
// prefix ("refs/heads/refs/heads/main" is the branch "refs/heads/main"), or "" for a tag or
// any other ref.
func branchOfRef(ref string) string {
	b, ok := strings.CutPrefix(ref, "refs/heads/")
	if !ok {
		return ""
	}
	return b
}

// githubEventSum is the digest a GitHub delivery's run is keyed on: the SHA-256 of its JSON
// without the top-level installation member, in a canonical form (members sorted, values
// compacted). GitHub sends one event to every hook subscribed to it (a repository's, an
// organization's, a GitHub App's) under one X-GitHub-Delivery, with the same payload but for
// installation, which only an App's delivery carries: so the event starts one run whichever
// hooks deliver it, even at once. The signature still covers each body whole, so a replayed
// body, under whatever delivery ID, is the same event too. obj is body's JSON object
// (decodeObject); body's own digest is the fallback should it not marshal again.
func githubEventSum(body []byte, obj map[string]json.RawMessage) [sha256.Size]byte {
	if _, ok := obj["installation"]; ok {
		obj = maps.Clone(obj)
		delete(obj, "installation")
	}
	canon, err := json.Marshal(obj)
	if err != nil {
		return sha256.Sum256(body)
	}
	return sha256.Sum256(canon)
}
