package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"
)

// check is one validation rule: it returns the violations it finds and
// how to fix each.
type check struct {
	rule string
	run  func(from peer.ID, capability string, r AgentRequest) ([]Violation, []string)
}

// rules returns seed 003's validation rules in order. Rate limits are
// enforced by the node's policy before a request reaches the librarian.
func (l *Librarian) rules() []check {
	return []check{
		{"required_fields", l.checkRequired},
		{"agent_authorization", l.checkAuthorization},
		{"content_format", l.checkFormat},
		{"references", l.checkReferences},
		{"target_exists", l.checkTarget},
	}
}

func (l *Librarian) checkRequired(_ peer.ID, capability string, r AgentRequest) ([]Violation, []string) {
	fields := map[string]string{"content": r.Content, "rationale": r.Rationale, "target_type": r.TargetType}
	var vs []Violation
	var fix []string
	for _, f := range requiredFields[capability] {
		if strings.TrimSpace(fields[f]) == "" {
			vs = append(vs, Violation{Rule: "required_fields", Description: fmt.Sprintf("%s is required for %s", f, requestType(capability))})
			fix = append(fix, fmt.Sprintf("add %s", f))
		}
	}
	return vs, fix
}

func (l *Librarian) checkAuthorization(from peer.ID, capability string, r AgentRequest) ([]Violation, []string) {
	e, ok := l.registry[from]
	if !ok {
		return []Violation{{Rule: "agent_authorization", Description: "agent not in the registry"}},
			[]string{"register the agent in the agent registry"}
	}
	if r.AgentID != e.Name {
		return []Violation{{Rule: "agent_authorization", Description: fmt.Sprintf("agent_id %q is not this agent's registered name %q", r.AgentID, e.Name)}},
			[]string{fmt.Sprintf("send agent_id %q", e.Name)}
	}
	if capability == CapApproval && r.Action != "read" && !slices.Contains(e.Capabilities, "write") {
		return []Violation{{Rule: "agent_authorization", Description: fmt.Sprintf("%s (%s) lacks the write capability", e.Name, e.Type)}},
			[]string{"ask an agent with the write capability to make the change"}
	}
	if r.TargetType != "" && !slices.Contains(e.AllowedTargets, "all") && !slices.Contains(e.AllowedTargets, r.TargetType) {
		return []Violation{{Rule: "agent_authorization", Description: fmt.Sprintf("%s may not change %s (allowed_targets: %s)", e.Name, r.TargetType, strings.Join(e.AllowedTargets, ", "))}},
			[]string{fmt.Sprintf("target one of %s, or ask an agent allowed to change %s", strings.Join(e.AllowedTargets, ", "), r.TargetType)}
	}
	return nil, nil
}

func (l *Librarian) checkFormat(_ peer.ID, _ string, r AgentRequest) ([]Violation, []string) {
	switch r.TargetType {
	case "architecture", "design", "docs":
		if r.Content != "" && !strings.HasPrefix(r.Content, "# ") {
			return []Violation{{Rule: "content_format", Description: fmt.Sprintf("a %s document must start with a \"# \" title", r.TargetType)}},
				[]string{"start the content with a markdown title line, e.g. \"# New Feature Design\""}
		}
	}
	return nil, nil
}

func (l *Librarian) checkReferences(_ peer.ID, _ string, r AgentRequest) ([]Violation, []string) {
	if len(r.References) > maxReferences {
		return []Violation{{Rule: "references", Description: fmt.Sprintf("%d references, at most %d", len(r.References), maxReferences)}},
			[]string{"cite only the specifications consulted"}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var vs []Violation
	var fix []string
	for _, ref := range r.References {
		if l.catalogue[ref] == nil {
			vs = append(vs, Violation{Rule: "references", Description: fmt.Sprintf("invalid reference %s: no such specification", ref)})
			fix = append(fix, fmt.Sprintf("QUERY the catalogue and replace %s with an existing specification id", ref))
		}
	}
	return vs, fix
}

func (l *Librarian) checkTarget(_ peer.ID, _ string, r AgentRequest) ([]Violation, []string) {
	if r.TargetPath == "" {
		if r.Action == "modify" || r.Action == "delete" {
			return []Violation{{Rule: "target_exists", Description: r.Action + " needs a target_path"}}, []string{"name the item to " + r.Action}
		}
		return nil, nil
	}
	l.mu.Lock()
	_, exists := l.byPath[r.TargetPath]
	l.mu.Unlock()
	switch {
	case r.Action == "create" && exists:
		return []Violation{{Rule: "target_exists", Description: r.TargetPath + " already exists"}}, []string{"use action modify, or another target_path"}
	case (r.Action == "modify" || r.Action == "delete") && !exists:
		return []Violation{{Rule: "target_exists", Description: r.TargetPath + " does not exist"}}, []string{"use action create, or QUERY for the existing path"}
	}
	return nil, nil
}

// evaluate runs every rule, reporting each to progress, and returns all
// violations and suggestions (so one rejection says everything to fix).
func (l *Librarian) evaluate(from peer.ID, capability string, r AgentRequest, progress func(rule string, passed bool)) ([]Violation, []string) {
	var vs []Violation
	var fix []string
	for _, c := range l.rules() {
		v, f := c.run(from, capability, r)
		if progress != nil {
			progress(c.rule, len(v) == 0)
		}
		vs = append(vs, v...)
		fix = append(fix, f...)
	}
	return vs, fix
}

// escalation reports why a request needs a human, or "".
func escalation(r AgentRequest) string {
	switch {
	case len(r.Deviations) > maxDeviations:
		return fmt.Sprintf("%d deviations from standards (at most %d)", len(r.Deviations), maxDeviations)
	case len(r.Deviations) > 0:
		var ds []string
		for _, d := range r.Deviations {
			keys := make([]string, 0, len(d))
			for k := range d {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var kv []string
			for _, k := range keys {
				kv = append(kv, k+"="+d[k])
			}
			ds = append(ds, strings.Join(kv, " "))
		}
		return "deviations from standards need human review (allow_deviations is false): " + strings.Join(ds, "; ")
	case strings.EqualFold(r.RiskAssessment, "high"):
		return "high risk assessment"
	}
	return ""
}
