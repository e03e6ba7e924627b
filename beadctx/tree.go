package beadctx

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/meshagent/meshagent/protocol"
)

// A document is kept as an immutable tree: an object is an *object, any
// other value its compact JSON bytes (json.RawMessage). A merge copies
// only the objects on the paths it changes and shares the rest, so
// replaying a bead's log costs the size of its patches, not of its
// document times its patches.
type object struct {
	members map[string]member
	size    int // the length of the object's encoding
}

type member struct {
	key []byte // the name as a JSON string
	v   any
}

var null = json.RawMessage("null")

func sizeOf(v any) int {
	if o, ok := v.(*object); ok {
		return o.size
	}
	return len(v.(json.RawMessage))
}

func newObject(members map[string]member) *object {
	size := 2 + max(len(members)-1, 0) // braces, commas
	for _, m := range members {
		size += len(m.key) + 1 + sizeOf(m.v)
	}
	return &object{members: members, size: size}
}

// parse reads one JSON value into a tree, refusing repeated members and
// invalid UTF-8.
func parse(data []byte) (any, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		var b bytes.Buffer
		if err := json.Compact(&b, data); err != nil {
			return nil, err
		}
		if !json.Valid(b.Bytes()) {
			return nil, fmt.Errorf("not JSON")
		}
		return json.RawMessage(b.Bytes()), nil
	}
	var raw map[string]json.RawMessage
	if err := protocol.DecodeStrict(data, &raw); err != nil {
		return nil, err
	}
	members := make(map[string]member, len(raw))
	for k, rv := range raw {
		v, err := parse(rv)
		if err != nil {
			return nil, err
		}
		members[k] = member{key: encodeKey(k), v: v}
	}
	return newObject(members), nil
}

func encodeKey(k string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(k) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func isNullValue(v any) bool {
	r, ok := v.(json.RawMessage)
	return ok && string(r) == "null"
}

// merge is RFC 7396 on trees: it returns target with patch applied and
// changes neither.
func merge(target, patch any) any {
	p, ok := patch.(*object)
	if !ok {
		return patch
	}
	t, _ := target.(*object)
	members := make(map[string]member, len(p.members)+func() int {
		if t == nil {
			return 0
		}
		return len(t.members)
	}())
	if t != nil {
		for k, m := range t.members {
			members[k] = m
		}
	}
	for k, pm := range p.members {
		if isNullValue(pm.v) {
			delete(members, k)
			continue
		}
		var old any
		if m, ok := members[k]; ok {
			old = m.v
		}
		members[k] = member{key: pm.key, v: merge(old, pm.v)}
	}
	return newObject(members)
}

// encodeTree writes a tree: object members sorted by name.
func encodeTree(v any) []byte {
	b := make([]byte, 0, sizeOf(v))
	return appendTree(b, v)
}

func appendTree(b []byte, v any) []byte {
	o, ok := v.(*object)
	if !ok {
		return append(b, v.(json.RawMessage)...)
	}
	names := make([]string, 0, len(o.members))
	for k := range o.members {
		names = append(names, k)
	}
	slices.Sort(names)
	b = append(b, '{')
	for i, k := range names {
		if i > 0 {
			b = append(b, ',')
		}
		m := o.members[k]
		b = append(b, m.key...)
		b = append(b, ':')
		b = appendTree(b, m.v)
	}
	return append(b, '}')
}
