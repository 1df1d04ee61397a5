package orchestrator

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Lock namespaces: each remote mutator's key prefix (docs/architecture.md, "Lock keys and
// namespaces"). Every lock key a pipeline takes lies in exactly one of them; CheckNamespaces
// refuses a set in which one is a prefix of another.
const (
	NamespaceCoolify = "coolify:"
	NamespaceMobile  = "mobile:"
)

// NamespaceDaemon holds the daemons' own keys (liveness and takeover leases); no pipeline
// takes a key in it.
const NamespaceDaemon = "daemon:"

// Namespaces returns the namespaces of the remote mutators, in registration order.
func Namespaces() []string { return []string{NamespaceCoolify, NamespaceMobile} }

// Lock keys of the two Coolify phases.
const (
	Phase1Key = NamespaceCoolify + "phase1"
	Phase2Key = NamespaceCoolify + "phase2"
)

// IsPhaseKey reports whether key names a phase lock ("<namespace>phase…", e.g. Phase1Key),
// which waits under the phase budget by default, not the service budget.
func IsPhaseKey(key string) bool {
	_, name, ok := strings.Cut(key, ":")
	if !ok {
		name = key
	}
	return strings.HasPrefix(name, "phase")
}

// ServiceLockKey is the lock key of a Coolify resource: "coolify:<uuid>".
func ServiceLockKey(uuid string) string { return NamespaceCoolify + uuid }

// MobileLockKey is the lock key of a Flagsmith feature: "mobile:flagsmith:<feature>".
func MobileLockKey(feature string) string { return NamespaceMobile + "flagsmith:" + feature }

// DaemonLiveKey is the liveness lease of a daemon instance: held (and renewed) while it runs.
func DaemonLiveKey(instance string) string { return NamespaceDaemon + "live:" + instance }

// DaemonTakeoverKey is held by the daemon taking over a dead instance's runs.
func DaemonTakeoverKey(instance string) string { return NamespaceDaemon + "takeover:" + instance }

// NamespaceOf returns the namespace of Namespaces that key lies in, or "" when it lies in
// none. Because CheckNamespaces(Namespaces()) holds, a key lies in at most one.
func NamespaceOf(key string) string {
	for _, ns := range Namespaces() {
		if strings.HasPrefix(key, ns) && len(key) > len(ns) {
			return ns
		}
	}
	return ""
}

// CheckNamespaces reports the first pair of namespaces that overlap: equal, or one a prefix
// of the other, so that a key could lie in both. It also refuses an empty namespace and one
// that does not end in ':'. The error names both namespaces.
func CheckNamespaces(namespaces []string) error {
	for i, a := range namespaces {
		if a == "" || !strings.HasSuffix(a, ":") {
			return fmt.Errorf("lock namespace %q: want a non-empty prefix ending in ':'", a)
		}
		for _, b := range namespaces[:i] {
			if strings.HasPrefix(a, b) || strings.HasPrefix(b, a) {
				return fmt.Errorf("lock namespaces %q and %q overlap: a key could lie in both", b, a)
			}
		}
	}
	return nil
}

// lockKeyNamePattern is the part of a lock key after its namespace.
var lockKeyNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$`)

// LockKeyError is CheckLockKey's refusal: the key and why. It matches ErrInvalid.
type LockKeyError struct {
	Key    string
	Reason string
}

func (e *LockKeyError) Error() string { return fmt.Sprintf("lock key %q: %s", e.Key, e.Reason) }

// Is makes a *LockKeyError match ErrInvalid.
func (e *LockKeyError) Is(target error) bool { return target == ErrInvalid }

// CheckLockKey is the one rule for lock keys an operator names (the API's {key} and the
// CLI's `locks release|freeze|unfreeze KEY`): "<namespace><name>" in one of Namespaces
// (coolify:, mobile:), the name 1-200 characters of letters, digits, '_', '.', ':' and '-',
// starting with a letter or digit, without "..". A typo such as "coolfy:phase2" is refused
// instead of freezing a key no run ever takes. Errors: *LockKeyError.
func CheckLockKey(key string) error {
	if ns := NamespaceOf(key); ns != "" {
		name := strings.TrimPrefix(key, ns)
		if lockKeyNamePattern.MatchString(name) && !strings.Contains(name, "..") {
			return nil
		}
	}
	return &LockKeyError{Key: key, Reason: fmt.Sprintf("a lock key is <namespace><name> in one of the namespaces %s (e.g. %s)",
		strings.Join(Namespaces(), ", "), Phase2Key)}
}

// Lock holders: what a lease says about who holds it. Listings, the audit, the dashboard and
// forced releases by holder all read these strings, so every backend shows the same ones.

// StepHolderPrefix is the holder prefix shared by every lease of one run:
// "<pipeline>#<build>/", with the run ID standing in for a missing build.
func StepHolderPrefix(pipeline, build, runID string) string {
	if build == "" {
		build = runID
	}
	return pipeline + "#" + build + "/"
}

// StepHolder is the holder of a run step's lease: "<pipeline>#<build>/<step>", e.g.
// "prod#1234/api".
func StepHolder(pipeline, build, runID, step string) string {
	return StepHolderPrefix(pipeline, build, runID) + step
}

// DaemonHolder is the holder of a daemon's own leases (liveness, takeover):
// "daemon/<instance>".
func DaemonHolder(instance string) string { return "daemon/" + instance }

// MaxFreeze is the longest operator freeze, from now to its end: the API refuses a longer
// one, and so does the CLI's `locks freeze` on the local backend.
const MaxFreeze = 30 * 24 * time.Hour

// OperatorHolder is the holder of an operator's freeze: "operator:<by>", or
// "operator:unknown" when nobody is named.
func OperatorHolder(by string) string {
	if by == "" {
		by = "unknown"
	}
	return "operator:" + by
}
