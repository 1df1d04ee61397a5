package mobile

import (
	"bytes"
	"fmt"
	"strings"
)

// Revert makes a Request put back what an earlier step wrote (a rollback of the release it
// belongs to), instead of applying Changes: each field the step changed (or the whole value)
// goes back to what it was before that step, as long as it still holds what the step wrote. A
// field that holds anything else was changed since, by a person or another run: it is kept,
// and reported in Result.Skipped (Current what it holds, Wanted what the revert would have
// put back). A field the step created is removed.
//
// The revert is worked out on the value read inside the step's read-compare-write, like any
// change, so an edit made just before the write is kept too.
type Revert struct {
	// Old and New are the earlier step's Result.Old and Result.New.
	Old, New Value
	// Paths are the fields it changed (its changes' paths that it did not skip); "" is the
	// whole value.
	Paths []string
}

// next returns the value r's write sets from cur (Changes applied, or Revert worked out),
// what it left out, and whether it differs from cur.
func (r Request) next(cur Value) (Value, []Skipped, bool, error) {
	if r.Revert != nil {
		return r.Revert.apply(cur)
	}
	return apply(cur, r.Changes)
}

func (rv Revert) apply(cur Value) (Value, []Skipped, bool, error) {
	for _, p := range rv.Paths {
		if p == "" { // the whole value
			if cur != rv.New {
				return cur, []Skipped{{Current: cur.String(), Wanted: rv.Old.String()}}, false, nil
			}
			return rv.Old, nil, rv.Old != cur, nil
		}
	}
	doc, err := documentOf(cur)
	if err != nil {
		return Value{}, nil, false, fmt.Errorf("%w: revert: the feature value is not a JSON object now: %v", ErrChange, err)
	}
	wrote, err := documentOf(rv.New)
	if err != nil {
		return Value{}, nil, false, fmt.Errorf("%w: revert: the value written: %v", ErrChange, err)
	}
	was, err := documentOf(rv.Old)
	if err != nil {
		return Value{}, nil, false, fmt.Errorf("%w: revert: the value before: %v", ErrChange, err)
	}
	before := doc.encode()
	var kept []Skipped
	for _, p := range rv.Paths {
		segs := strings.Split(p, ".")
		now, nowOK := doc.get(segs)
		ours, oursOK := wrote.get(segs)
		old, oldOK := was.get(segs)
		if nowOK != oursOK || encodeAny(now) != encodeAny(ours) {
			kept = append(kept, Skipped{Path: p, Current: encodeAny(now), Wanted: encodeAny(old)})
			continue
		}
		if oldOK {
			if err := doc.putPath(segs, old); err != nil {
				return Value{}, nil, false, fmt.Errorf("%w: revert %s: %v", ErrChange, p, err)
			}
		} else {
			doc.remove(segs)
		}
	}
	after := doc.encode()
	if after == before {
		return cur, kept, false, nil
	}
	return StringValue(after), kept, true, nil
}

// documentOf reads a feature value as a JSON document: null or a blank string is an empty
// one.
func documentOf(v Value) (*object, error) {
	switch {
	case v.Kind == KindNull || (v.Kind == KindString && strings.TrimSpace(v.Str) == ""):
		return &object{vals: map[string]any{}}, nil
	case v.Kind == KindString:
		return parseDocument(v.Str)
	}
	return nil, fmt.Errorf("a %s, not a JSON document", v.Kind)
}

// get returns the value at the path, and whether it is there.
func (o *object) get(segs []string) (any, bool) {
	cur := o
	for i, s := range segs {
		v, ok := cur.vals[s]
		if !ok {
			return nil, false
		}
		if i == len(segs)-1 {
			return v, true
		}
		if cur, ok = v.(*object); !ok {
			return nil, false
		}
	}
	return nil, false
}

// putPath sets the value at the path, making the objects on the way.
func (o *object) putPath(segs []string, v any) error {
	parent := o
	for i, s := range segs[:len(segs)-1] {
		next, ok := parent.vals[s]
		if !ok || next == nil {
			child := &object{vals: map[string]any{}}
			parent.put(s, child)
			parent = child
			continue
		}
		child, ok := next.(*object)
		if !ok {
			return fmt.Errorf("%q is not an object", strings.Join(segs[:i+1], "."))
		}
		parent = child
	}
	parent.put(segs[len(segs)-1], v)
	return nil
}

// remove deletes the value at the path, if it is there.
func (o *object) remove(segs []string) {
	parent := o
	for _, s := range segs[:len(segs)-1] {
		child, ok := parent.vals[s].(*object)
		if !ok {
			return
		}
		parent = child
	}
	last := segs[len(segs)-1]
	if _, ok := parent.vals[last]; !ok {
		return
	}
	delete(parent.vals, last)
	for i, k := range parent.keys {
		if k == last {
			parent.keys = append(parent.keys[:i], parent.keys[i+1:]...)
			break
		}
	}
}

// encodeAny renders a document value compactly ("" for none).
func encodeAny(v any) string {
	var b bytes.Buffer
	writeJSON(&b, v)
	return b.String()
}

// FieldValue is one field a step changed with its value before and after, as JSON text ("" when
// the field was not there).
type FieldValue struct {
	Path     string
	Old, New string
}

// FieldValues returns, for each of paths ("" for the whole value), its value in old and in
// new: what a step's Result changed, to show people (a feature's remote config is read by
// every app, it holds no secret). A value that is not a JSON document gives its whole value
// for each path.
func FieldValues(old, new Value, paths []string) []FieldValue {
	od, oerr := documentOf(old)
	nd, nerr := documentOf(new)
	out := make([]FieldValue, 0, len(paths))
	for _, p := range paths {
		if p == "" || oerr != nil || nerr != nil {
			out = append(out, FieldValue{Path: p, Old: old.String(), New: new.String()})
			continue
		}
		segs := strings.Split(p, ".")
		fv := FieldValue{Path: p}
		if v, ok := od.get(segs); ok {
			fv.Old = encodeAny(v)
		}
		if v, ok := nd.get(segs); ok {
			fv.New = encodeAny(v)
		}
		out = append(out, fv)
	}
	return out
}
