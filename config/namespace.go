package config

import (
	"fmt"
	"regexp"
	"strings"
)

// NamespaceOf returns the registered namespace key lies in, or "" when it lies in none.
// Because CheckNamespaces(Namespaces()) holds, a key lies in at most one.
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

// CheckLockKey is the one rule for lock keys an operator names (the API's {key} and the
// CLI's `locks release|freeze|unfreeze KEY`): "<namespace><name>" in a registered namespace
// (coolify:, mobile:), the name 1-200 characters of letters, digits, '_', '.', ':' and '-',
// starting with a letter or digit, without "..". A typo such as "coolfy:phase2" is refused
// instead of freezing a key no run ever takes.
func CheckLockKey(key string) error {
	if ns := NamespaceOf(key); ns != "" {
		name := strings.TrimPrefix(key, ns)
		if lockKeyNamePattern.MatchString(name) && !strings.Contains(name, "..") {
			return nil
		}
	}
	return fmt.Errorf("lock key %q: a lock key is <namespace><name> in one of the namespaces %s (e.g. %s)",
		key, strings.Join(Namespaces(), ", "), Phase2Key)
}
