package protocol

import "testing"

func TestFilterAdmits(t *testing.T) {
	self, persona, caps := "agent-a", "qa", []string{"run_tests", "review"}
	tests := []struct {
		name   string
		filter *Filter
		want   bool
	}{
		{"nil admits", nil, true},
		{"empty admits", &Filter{}, true},
		{"included", &Filter{IncludeAgents: []string{"agent-b", "agent-a"}}, true},
		{"not included", &Filter{IncludeAgents: []string{"agent-b"}}, false},
		{"excluded", &Filter{ExcludeAgents: []string{"agent-a"}}, false},
		{"exclude beats include", &Filter{IncludeAgents: []string{"agent-a"}, ExcludeAgents: []string{"agent-a"}}, false},
		{"persona matches", &Filter{PersonaTypes: []string{"engineer", "qa"}}, true},
		{"persona differs", &Filter{PersonaTypes: []string{"engineer"}}, false},
		{"has all capabilities", &Filter{Capabilities: []string{"review", "run_tests"}}, true},
		{"lacks one capability", &Filter{Capabilities: []string{"review", "deploy"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.filter.Admits(self, persona, caps); got != tt.want {
				t.Fatalf("Admits = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestTopicFamily(t *testing.T) {
	for topic, want := range map[string]string{
		"inbound:chat-1":        "inbound",
		"bead.status.completed": "bead",
		"system:agent.spawned":  "system",
		"news":                  "news",
		"outbound:*":            "outbound",
		"*":                     "*",
		"":                      "",
	} {
		if got := TopicFamily(topic); got != want {
			t.Errorf("TopicFamily(%q) = %q, want %q", topic, got, want)
		}
	}
}
