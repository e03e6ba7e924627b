package protocol

import (
	"encoding"
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"sync"
)

// planKind is how the strict decoder fills one Go type.
type planKind uint8

const (
	kString planKind = iota
	kBool
	kInt
	kUint
	kFloat
	kStruct
	kPointer
	kSlice
	kMap      // map with string keys
	kRaw      // json.RawMessage: any value, kept as its bytes
	kJSON     // implements json.Unmarshaler
	kText     // implements encoding.TextUnmarshaler: a JSON string
	kDelegate // anything else (interfaces, arrays, []byte, other maps): encoding/json
)

// plan is the reflection a strict decode needs for one type, worked out
// once per type (planFor caches it).
type plan struct {
	t      reflect.Type
	kind   planKind
	elem   *plan          // kPointer, kSlice, kMap
	fields []planField    // kStruct, in declaration order
	index  map[string]int // kStruct with many fields: name → fields index
	// required lists the indexes of fields tagged ",required".
	required []int
}

// planField is one JSON member of a struct.
type planField struct {
	name string
	// index is the path of struct field indexes from the outer struct,
	// longer than one for a field promoted from an embedded struct.
	index    []int
	plan     *plan
	required bool
}

// manyFields is the field count above which a struct's members are found
// through a map rather than by comparing names in turn.
const manyFields = 12

var (
	plans   sync.Map // reflect.Type → *plan
	planMu  sync.Mutex
	rawType = reflect.TypeFor[json.RawMessage]()
	jsonU   = reflect.TypeFor[json.Unmarshaler]()
	textU   = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// planFor returns the plan of t, building and caching it on first use.
func planFor(t reflect.Type) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	planMu.Lock()
	defer planMu.Unlock()
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	building := map[reflect.Type]*plan{}
	p := buildPlan(t, building)
	// Store every plan built on the way only once all are complete, so a
	// reader never sees a half-built recursive plan.
	for bt, bp := range building {
		plans.Store(bt, bp)
	}
	return p
}

func buildPlan(t reflect.Type, building map[reflect.Type]*plan) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	if p := building[t]; p != nil {
		return p // a recursive type: filled in by the outer call
	}
	p := &plan{t: t}
	building[t] = p
	pt := reflect.PointerTo(t)
	// Pointers and interfaces are followed, not asked to unmarshal
	// themselves: encoding/json does the same.
	concrete := t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface
	switch {
	case t == rawType:
		p.kind = kRaw
	case concrete && (t.Implements(jsonU) || pt.Implements(jsonU)):
		p.kind = kJSON
	case concrete && (t.Implements(textU) || pt.Implements(textU)):
		p.kind = kText
	default:
		p.kind = kDelegate
		switch t.Kind() {
		case reflect.String:
			p.kind = kString
		case reflect.Bool:
			p.kind = kBool
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			p.kind = kInt
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			p.kind = kUint
		case reflect.Float32, reflect.Float64:
			p.kind = kFloat
		case reflect.Pointer:
			p.kind, p.elem = kPointer, buildPlan(t.Elem(), building)
		case reflect.Slice:
			if t.Elem().Kind() != reflect.Uint8 { // []byte is base64: encoding/json's job
				p.kind, p.elem = kSlice, buildPlan(t.Elem(), building)
			}
		case reflect.Map:
			if t.Key().Kind() == reflect.String && !reflect.PointerTo(t.Key()).Implements(textU) {
				p.kind, p.elem = kMap, buildPlan(t.Elem(), building)
			}
		case reflect.Struct:
			p.kind = kStruct
			p.fields = structFields(t, building)
			for i, f := range p.fields {
				if f.required {
					p.required = append(p.required, i)
				}
			}
			if len(p.fields) > manyFields {
				p.index = make(map[string]int, len(p.fields))
				for i, f := range p.fields {
					p.index[f.name] = i
				}
			}
		}
	}
	return p
}

// field returns the index of the member called name, or -1.
func (p *plan) field(name []byte) int {
	if p.index != nil {
		if i, ok := p.index[string(name)]; ok {
			return i
		}
		return -1
	}
	for i := range p.fields {
		if p.fields[i].name == string(name) {
			return i
		}
	}
	return -1
}

// candidate is a JSON member found while walking a struct and the structs
// it embeds.
type candidate struct {
	name     string
	index    []int
	t        reflect.Type
	tagged   bool
	required bool
}

// structFields lists the JSON members of struct t the way encoding/json
// does: exported fields by their tag name (or Go name), "-" skipped,
// fields of embedded structs promoted, and of several fields with one name
// the shallowest wins, a tagged one among equals; a tie drops them all.
func structFields(t reflect.Type, building map[reflect.Type]*plan) []planField {
	var all []candidate
	type level struct {
		t     reflect.Type
		index []int
	}
	current, visited := []level{{t: t}}, map[reflect.Type]bool{}
	for len(current) > 0 {
		var next []level
		var found []candidate
		for _, lv := range current {
			if visited[lv.t] {
				continue
			}
			visited[lv.t] = true
			for i := 0; i < lv.t.NumField(); i++ {
				sf := lv.t.Field(i)
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, opts, _ := strings.Cut(tag, ",")
				index := append(append([]int(nil), lv.index...), i)
				ft := sf.Type
				if sf.Anonymous {
					et := ft
					if et.Kind() == reflect.Pointer {
						et = et.Elem()
					}
					if !sf.IsExported() && et.Kind() != reflect.Struct {
						continue
					}
					if name == "" && et.Kind() == reflect.Struct {
						if !sf.IsExported() && ft.Kind() == reflect.Pointer {
							continue // encoding/json cannot set it either
						}
						next = append(next, level{t: et, index: index})
						continue
					}
				} else if !sf.IsExported() {
					continue
				}
				c := candidate{name: name, index: index, t: ft, tagged: name != ""}
				if c.name == "" {
					c.name = sf.Name
				}
				for _, o := range strings.Split(opts, ",") {
					c.required = c.required || o == "required"
				}
				found = append(found, c)
			}
		}
		// Names already taken at a shallower depth hide deeper ones.
		taken := map[string]bool{}
		for _, c := range all {
			taken[c.name] = true
		}
		byName := map[string][]candidate{}
		var order []string
		for _, c := range found {
			if taken[c.name] {
				continue
			}
			if byName[c.name] == nil {
				order = append(order, c.name)
			}
			byName[c.name] = append(byName[c.name], c)
		}
		for _, n := range order {
			if c, ok := dominant(byName[n]); ok {
				all = append(all, c)
			} else {
				all = append(all, candidate{name: n}) // a tie hides the name below too
			}
		}
		current = next
	}
	sort.SliceStable(all, func(i, j int) bool { return lessIndex(all[i].index, all[j].index) })
	out := make([]planField, 0, len(all))
	for _, c := range all {
		if c.index == nil {
			continue
		}
		out = append(out, planField{name: c.name, index: c.index, required: c.required, plan: buildPlan(c.t, building)})
	}
	return out
}

// dominant picks the field among same-depth fields of one name.
func dominant(cs []candidate) (candidate, bool) {
	if len(cs) == 1 {
		return cs[0], true
	}
	var tagged []candidate
	for _, c := range cs {
		if c.tagged {
			tagged = append(tagged, c)
		}
	}
	if len(tagged) == 1 {
		return tagged[0], true
	}
	return candidate{}, false
}

func lessIndex(a, b []int) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

// MemberNames returns the member names DecodeStrict matches for the struct
// v points to (or is), in declaration order, promoted members included.
// It returns nil for other types.
func MemberNames(v any) []string {
	t := reflect.TypeOf(v)
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	p := planFor(t)
	names := make([]string, len(p.fields))
	for i, f := range p.fields {
		names[i] = f.name
	}
	return names
}
