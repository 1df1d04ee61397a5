package analysis

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Condition compares a measured value with a number: "< 0.05", ">= 100", "== 0".
type Condition struct {
	Op    string
	Value float64
}

// ops are the comparison operators of a condition, longest first (so "<=" is not read as
// "<").
var ops = []string{"<=", ">=", "==", "!=", "<", ">"}

// ParseCondition reads a condition: an operator (<, <=, >, >=, ==, !=) and a number.
func ParseCondition(s string) (Condition, error) {
	t := strings.TrimSpace(s)
	for _, op := range ops {
		rest, ok := strings.CutPrefix(t, op)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil || math.IsNaN(v) {
			return Condition{}, fmt.Errorf("%q: want an operator and a number, e.g. \"< 0.05\"", s)
		}
		return Condition{Op: op, Value: v}, nil
	}
	return Condition{}, fmt.Errorf("%q: want one of < <= > >= == != and a number, e.g. \"< 0.05\"", s)
}

// Met reports whether v satisfies the condition. NaN satisfies none.
func (c Condition) Met(v float64) bool {
	switch {
	case math.IsNaN(v):
		return false
	case c.Op == "<":
		return v < c.Value
	case c.Op == "<=":
		return v <= c.Value
	case c.Op == ">":
		return v > c.Value
	case c.Op == ">=":
		return v >= c.Value
	case c.Op == "==":
		return v == c.Value
	case c.Op == "!=":
		return v != c.Value
	}
	return false
}

// String writes the condition as ParseCondition reads it.
func (c Condition) String() string {
	return c.Op + " " + strconv.FormatFloat(c.Value, 'g', -1, 64)
}
