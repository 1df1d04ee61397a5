package orchestrator

import (
	"fmt"
	"strings"
)

// Env change actions.
const (
	EnvCreate    = "create"
	EnvUpdate    = "update"
	EnvUnchanged = "unchanged" // only in plans
)

// EnvChange is what a write did (or a plan would do) to one env var: its key, the action, and
// for an update which of the value, flags and comment change. The value itself is never kept.
// A run's steps (runs.Changes) and a Plan list them.
type EnvChange struct {
	Key    string `json:"key"`
	Action string `json:"action"`
	// ValueChanged: the value differs from the current one (update only).
	ValueChanged bool `json:"value_changed,omitempty"`
	// ValueUnknown: the current value is hidden (is_shown_once), so it is written whether or
	// not it differs.
	ValueUnknown bool `json:"value_unknown,omitempty"`
	// Flags are the flags that change: for a create, those set unlike Coolify's defaults for a
	// new variable.
	Flags []FlagChange `json:"flags,omitempty"`
	// Comment is the comment change, nil when it stays.
	Comment *CommentChange `json:"comment,omitempty"`
}

// FlagChange is one boolean flag of an env var (is_buildtime, is_runtime, is_literal,
// is_multiline, is_shown_once) going from Old to New.
type FlagChange struct {
	Name string `json:"name"`
	Old  bool   `json:"old"`
	New  bool   `json:"new"`
}

// CommentChange is an env var's comment going from Old to New.
type CommentChange struct {
	Old string `json:"old"`
	New string `json:"new"`
}

// String is `KEY created`, `KEY created (is_buildtime false)`, `KEY (value, is_literal true → false,
// comment "a" → "b")` or `KEY unchanged`.
func (e EnvChange) String() string {
	var what []string
	switch {
	case e.ValueUnknown:
		what = append(what, "value (current one hidden)")
	case e.ValueChanged:
		what = append(what, "value")
	}
	for _, f := range e.Flags {
		if e.Action == EnvCreate {
			what = append(what, fmt.Sprintf("%s %t", f.Name, f.New))
		} else {
			what = append(what, fmt.Sprintf("%s %t → %t", f.Name, f.Old, f.New))
		}
	}
	if c := e.Comment; c != nil {
		if e.Action == EnvCreate {
			what = append(what, fmt.Sprintf("comment %q", c.New))
		} else {
			what = append(what, fmt.Sprintf("comment %q → %q", c.Old, c.New))
		}
	}
	head := e.Key
	switch e.Action {
	case EnvCreate:
		head += " created"
	case EnvUnchanged:
		return e.Key + " unchanged"
	}
	if len(what) == 0 {
		return head
	}
	return head + " (" + strings.Join(what, ", ") + ")"
}

// TagChange is an image tag going from Old to New ("" for none).
type TagChange struct {
	Old string `json:"old"`
	New string `json:"new"`
}
