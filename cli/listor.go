package cli

// listOrVerb names the shape of a command whose positional arguments are
// `NOUN list` or `NOUN VERB ARG` (dlq list | replay ID, durable list |
// forget NAME).
type listOrVerb struct {
	noun, verb string
	arg        string // the argument's name in usage: ID, NAME
	argDesc    string // what VERB needs, in its usage error: "the ID of a dead letter"
}

// listOr runs list for `NOUN list` and act for `NOUN VERB ARG`, and words
// any other positional arguments as a usage error.
func (r *runState) listOr(v listOrVerb, list func() error, act func(arg string) error) error {
	switch p := r.positional; {
	case len(p) == 1 && p[0] == "list":
		return list()
	case len(p) == 2 && p[0] == v.verb && p[1] != "":
		return act(p[1])
	case len(p) >= 1 && p[0] == v.verb:
		return usageErrorf("%s %s needs %s (see `meshagent %s list`)", v.noun, v.verb, v.argDesc, v.noun)
	}
	return usageErrorf("%s needs `list` or `%s %s`", v.noun, v.verb, v.arg)
}
