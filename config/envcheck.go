package config

import (
	"math"
	"slices"
	"strings"
)

// EnvPrefix starts the name of every environment variable orchestrator reads itself.
const EnvPrefix = "ORCH_"

// UnknownEnv is an ORCH_* variable that is set although nothing reads it: most likely a
// mistyped setting, which would otherwise be silently ignored.
type UnknownEnv struct {
	Name string
	// Suggest is the known name it most likely stands for ("" when none is close).
	Suggest string
}

// String says what is wrong, with the suggestion when there is one; it never holds the value.
func (u UnknownEnv) String() string {
	s := u.Name + " is set but orchestrator reads no such variable, so it is ignored"
	if u.Suggest != "" {
		s += " (did you mean " + u.Suggest + "?)"
	}
	return s
}

// CheckEnv returns, sorted, the names among names (the variables set in the environment)
// that start with ORCH_ but that orchestrator does not read: neither a setting of the daemon
// config (EnvOverrides), nor an env-source secret (EnvSecretPrefix + KEY), nor one of known
// (the variables the caller reads itself, and those it saw read, such as ${NAME} references
// of the files it loaded). Each comes with the known name it most likely stands for.
func CheckEnv(names []string, known ...string) []UnknownEnv {
	all := make([]string, 0, len(envOverrides)+len(known))
	for k := range envOverrides {
		all = append(all, k)
	}
	all = append(all, known...)
	slices.Sort(all)
	all = slices.Compact(all)
	var out []UnknownEnv
	for _, n := range names {
		if !strings.HasPrefix(n, EnvPrefix) || (strings.HasPrefix(n, EnvSecretPrefix) && len(n) > len(EnvSecretPrefix)) {
			continue
		}
		if _, ok := slices.BinarySearch(all, n); ok {
			continue
		}
		out = append(out, UnknownEnv{Name: n, Suggest: closestEnv(n, all)})
	}
	slices.SortFunc(out, func(a, b UnknownEnv) int { return strings.Compare(a.Name, b.Name) })
	return slices.CompactFunc(out, func(a, b UnknownEnv) bool { return a.Name == b.Name })
}

// closestEnv is the known name that name most likely stands for, or "". Names are compared
// word by word (the parts between underscores): a word matches the same word, or one a typo
// away (ORCH_PUBLIC_REED → ORCH_PUBLIC_READ), and a word few known names share counts more
// than a common one, so ORCH_GITLAB_WEBHOOK_SECRET suggests ORCH_GITLAB_WEBHOOK_TOKEN rather
// than ORCH_GITHUB_WEBHOOK_SECRET. A name whose words match nothing (ORCH_REDISURL) gets the
// known name at the smallest edit distance, when that is small. The env-source secret
// prefix is a candidate too, suggested as ORCH_SECRET_<KEY>.
func closestEnv(name string, known []string) string {
	const secretCandidate = EnvSecretPrefix + "<KEY>"
	cands := append(slices.Clone(known), secretCandidate)
	words := func(s string) []string { return strings.Split(strings.TrimPrefix(s, EnvPrefix), "_") }
	// df counts the candidates each word appears in.
	df := map[string]int{}
	for _, c := range cands {
		seen := map[string]bool{}
		for _, w := range words(c) {
			if !seen[w] {
				df[w]++
				seen[w] = true
			}
		}
	}
	weight := func(w string) float64 { return math.Log(float64(len(cands)+1) / float64(df[w])) }
	best, bestScore := "", 0.0
	for _, c := range cands {
		cw := words(c)
		score := 0.0
		for _, w := range words(name) {
			top := 0.0
			for _, x := range cw {
				switch {
				case w == x:
					top = max(top, weight(x))
				case len(w) >= 4 && len(x) >= 4 && editDistance(w, x) <= max(1, len(x)/4):
					top = max(top, 0.8*weight(x))
				}
			}
			score += top
		}
		// Words of the candidate that the name lacks count against it a little, so that
		// ORCH_TOKEN does not suggest ORCH_GITLAB_WEBHOOK_TOKEN over ORCH_READ_TOKEN.
		score -= 0.1 * float64(len(cw))
		if score > bestScore {
			best, bestScore = c, score
		}
	}
	if best != "" {
		return best
	}
	bestDist := 4 // at most 3 edits
	for _, c := range cands {
		if d := editDistance(name, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes; the names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
