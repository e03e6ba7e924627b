package rpc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"regexp"
	"strings"
	"sync/atomic"

	"github.com/meshagent/meshagent/protocol"
)

// Bounds of a tokens file.
const (
	MaxTokensFileBytes = 1 << 20
	MaxTokens          = 1024
	MinTokenLen        = 16
	MaxTokenLen        = 512
	maxGrants          = 64
)

// GrantAdmin in a credential's methods grants bus.history,
// bus.deadLetters and bus.replay.
const GrantAdmin = "admin"

// Credential is what a token grants a connection on a public listener.
// It is read-only once loaded.
type Credential struct {
	// Name identifies the holder (letters, digits, '.', '_', '-'; at most
	// 64 bytes). Other parts of the relay (the lobby, a mesh provider's
	// ACL through the relay) read it as the client's name.
	Name string
	// Topics are the patterns the holder may subscribe to and send on;
	// empty allows every topic. A topic is allowed if a pattern matches
	// it by the one topic matcher, protocol.MatchTopic, which subscribe
	// and the mesh use too: "*" and "?" match across '.' and ':' but
	// not '/', so "a.*" allows "a.b.c" exactly as a subscription to
	// "a.*" receives it. A subscription pattern is allowed if it is one
	// of these, or provably narrower (see AllowsPattern).
	Topics []string
	// Methods are the methods granted beyond the bus's own (initialize,
	// ping, subscribe, unsubscribe, sendMessage): GrantAdmin, a method
	// name, or a path.Match pattern such as "mesh.*".
	Methods []string

	hash [sha256.Size]byte
	set  *Tokens
}

// AllowsMethod reports whether the credential grants a method that a
// public listener does not serve to everyone.
func (c *Credential) AllowsMethod(method string) bool {
	if c == nil {
		return false
	}
	for _, g := range c.Methods {
		if g == GrantAdmin {
			if adminMethods[method] {
				return true
			}
			continue
		}
		if ok, _ := path.Match(g, method); ok {
			return true
		}
	}
	return false
}

// AllowsTopic reports whether the credential may send on topic.
func (c *Credential) AllowsTopic(topic string) bool {
	if c == nil || len(c.Topics) == 0 {
		return true
	}
	for _, p := range c.Topics {
		if protocol.MatchTopic(p, topic) {
			return true
		}
	}
	return false
}

// AllowsPattern reports whether the credential may subscribe to pattern:
// every topic pattern matches must be one the credential allows. It
// accepts a pattern equal to an allowed one; an exact topic an allowed
// pattern matches; under an allowed pattern L* (L free of wildcards), a
// wildcard pattern that starts with L and has no '/' after it; and under
// an allowed prefix pattern (L ending in ':', '-', '.', '/' or '_'), any
// pattern starting with L. Anything it cannot prove narrower is refused:
// under L*, a remainder that can match the '/' that L*'s "*" never
// crosses (a '/', an escaped one, or a class that admits it: "a.[^x]"
// receives "a./").
// For every pattern it accepts, each topic the pattern matches is one
// AllowsTopic allows (FuzzAllowsPatternSound checks it).
func (c *Credential) AllowsPattern(pattern string) bool {
	if c == nil || len(c.Topics) == 0 {
		return true
	}
	wild := strings.ContainsAny(pattern, wildcards)
	prefixForm := !wild && pattern != "" && strings.ContainsRune(prefixEnds, rune(pattern[len(pattern)-1]))
	for _, a := range c.Topics {
		switch {
		case a == pattern:
			return true
		case !wild && !prefixForm && protocol.MatchTopic(a, pattern):
			return true
		}
		if strings.ContainsAny(a, wildcards) {
			lit, ok := strings.CutSuffix(a, "*")
			if ok && !strings.ContainsAny(lit, wildcards) && wild && strings.HasPrefix(pattern, lit) && neverMatchesSlash(pattern[len(lit):]) {
				return true
			}
			continue
		}
		if a != "" && strings.ContainsRune(prefixEnds, rune(a[len(a)-1])) && strings.HasPrefix(pattern, a) {
			return true
		}
	}
	return false
}

// neverMatchesSlash reports whether the rest of a path.Match pattern
// cannot match a '/' anywhere: "*" and "?" never do, nor a literal other
// than '/', nor a class that leaves '/' out ("[a-z]", "[^/]"). A pattern
// it cannot read is reported as matching one.
func neverMatchesSlash(rest string) bool {
	for i := 0; i < len(rest); i++ {
		switch c := rest[i]; c {
		case '/':
			return false
		case '\\':
			if i++; i >= len(rest) || rest[i] == '/' {
				return false
			}
		case '[':
			end, admits, ok := classAdmitsSlash(rest[i+1:])
			if !ok || admits {
				return false
			}
			i += end + 1
		}
	}
	return true
}

// classAdmitsSlash reads a path.Match class body (after its '[') and
// returns the index of its closing ']' in body and whether the class
// matches '/'; ok is false when the class is malformed.
func classAdmitsSlash(body string) (end int, admits, ok bool) {
	i, negated, has := 0, false, false
	if i < len(body) && body[i] == '^' {
		negated, i = true, i+1
	}
	read := func() (byte, bool) {
		if i >= len(body) {
			return 0, false
		}
		c := body[i]
		if c == '\\' {
			if i++; i >= len(body) {
				return 0, false
			}
			c = body[i]
		}
		i++
		return c, true
	}
	for first := true; ; first = false {
		if i >= len(body) {
			return 0, false, false
		}
		if body[i] == ']' && !first {
			break
		}
		lo, okLo := read()
		if !okLo {
			return 0, false, false
		}
		hi := lo
		if i < len(body) && body[i] == '-' {
			i++
			if hi, okLo = read(); !okLo {
				return 0, false, false
			}
		}
		if lo >= 0x80 || hi >= 0x80 {
			return 0, false, false // multi-byte runes: not judged
		}
		if lo <= '/' && '/' <= hi {
			has = true
		}
	}
	return i, has != negated, true
}

const (
	wildcards  = `*?[\`
	prefixEnds = ":-./_"
)

// adminMethods are the methods GrantAdmin grants: the bus's history and
// dead-letter queue.
var adminMethods = map[string]bool{"bus.history": true, "bus.deadLetters": true, "bus.replay": true}

// Tokens is a set of bearer tokens for a public listener, each mapped to
// a Credential. Only SHA-256 digests of the tokens are kept, and a
// presented token is compared with every digest in constant time. Reload
// replaces the set atomically; it is safe for concurrent use.
type Tokens struct {
	table atomic.Pointer[[]*Credential]
}

// tokenEntry is one element of a tokens file.
type tokenEntry struct {
	Name    string   `json:"name"`
	Token   string   `json:"token"`
	SHA256  string   `json:"sha256"`
	Topics  []string `json:"topics"`
	Methods []string `json:"methods"`
}

// tokensFile is a tokens file; its entries are decoded one by one, so
// that an error names the entry.
type tokensFile struct {
	Tokens []json.RawMessage `json:"tokens"`
}

var credentialName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ParseTokens reads a tokens file:
//
//	{"tokens": [
//	  {"name": "ops", "token": "<at least 16 characters>", "methods": ["admin", "mesh.*"]},
//	  {"name": "bridge", "sha256": "<hex SHA-256 of the token>", "topics": ["inbound:*", "outbound:*"]}
//	]}
//
// Each entry has a unique name and exactly one of token (printable ASCII,
// no spaces, 16 to 512 bytes) or sha256. Unknown members, wrong JSON
// types and trailing data are errors.
func ParseTokens(data []byte) (*Tokens, error) {
	t := &Tokens{}
	creds, err := parseTokens(data)
	if err != nil {
		return nil, err
	}
	t.set(creds)
	return t, nil
}

// LoadTokens reads a tokens file (see ParseTokens).
func LoadTokens(file string) (*Tokens, error) {
	data, err := readTokensFile(file)
	if err != nil {
		return nil, err
	}
	return ParseTokens(data)
}

// Reload replaces the set with the file's. On error the set is unchanged.
// A connection whose token is no longer in the set is disconnected on its
// next request, or at once by Server.DropRevoked; the others see their
// new grants on their next request.
func (t *Tokens) Reload(file string) error {
	data, err := readTokensFile(file)
	if err != nil {
		return err
	}
	creds, err := parseTokens(data)
	if err != nil {
		return err
	}
	t.set(creds)
	return nil
}

// Len returns the number of tokens in the set.
func (t *Tokens) Len() int { return len(*t.table.Load()) }

func (t *Tokens) set(creds []*Credential) {
	for _, c := range creds {
		c.set = t
	}
	t.table.Store(&creds)
}

func readTokensFile(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("rpc: tokens file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxTokensFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("rpc: tokens file %s: %w", file, err)
	}
	if len(data) > MaxTokensFileBytes {
		return nil, fmt.Errorf("rpc: tokens file %s is larger than %d bytes", file, MaxTokensFileBytes)
	}
	return data, nil
}

func parseTokens(data []byte) ([]*Credential, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("rpc: tokens file: "+format, args...)
	}
	var f tokensFile
	if err := decodeFileObject(data, &f); err != nil {
		if fe := (*protocol.FieldError)(nil); errors.As(err, &fe) && fe.Field == "tokens" && fe.Err == protocol.ErrWrongType {
			return nil, bad(`"tokens" must be an array of objects`)
		}
		return nil, bad("%v; it is {\"tokens\": [{\"name\", \"token\" or \"sha256\", \"topics\", \"methods\"}, …]}", err)
	}
	raws := f.Tokens
	if raws == nil {
		return nil, bad(`"tokens" must be an array of objects`)
	}
	if len(raws) > MaxTokens {
		return nil, bad("%d tokens; at most %d", len(raws), MaxTokens)
	}
	creds := make([]*Credential, 0, len(raws))
	names, hashes := map[string]bool{}, map[[sha256.Size]byte]bool{}
	for i, raw := range raws {
		var e tokenEntry
		if err := decodeFileObject(raw, &e); err != nil {
			return nil, bad("token %d: %v", i, err)
		}
		c := &Credential{Name: e.Name, Topics: e.Topics, Methods: e.Methods}
		switch {
		case !credentialName.MatchString(e.Name):
			return nil, bad("token %d: \"name\" %q must be 1 to 64 letters, digits, '.', '_' or '-'", i, e.Name)
		case names[e.Name]:
			return nil, bad("token %d: name %q is used twice", i, e.Name)
		case (e.Token == "") == (e.SHA256 == ""):
			return nil, bad("token %q: give exactly one of \"token\" and \"sha256\"", e.Name)
		case e.Token != "":
			if err := validToken(e.Token); err != nil {
				return nil, bad("token %q: %v", e.Name, err)
			}
			c.hash = sha256.Sum256([]byte(e.Token))
		default:
			h, err := hex.DecodeString(e.SHA256)
			if err != nil || len(h) != sha256.Size {
				return nil, bad("token %q: \"sha256\" must be 64 hex digits", e.Name)
			}
			copy(c.hash[:], h)
		}
		if hashes[c.hash] {
			return nil, bad("token %q: the same token is given twice", e.Name)
		}
		if len(e.Topics) > maxGrants || len(e.Methods) > maxGrants {
			return nil, bad("token %q: at most %d topics and %d methods", e.Name, maxGrants, maxGrants)
		}
		for _, p := range e.Topics {
			if p == "" || len(p) > MaxTopicLen || !protocol.ValidPattern(p) {
				return nil, bad("token %q: topic pattern %q is malformed", e.Name, p)
			}
		}
		for _, m := range e.Methods {
			if _, err := path.Match(m, ""); err != nil || m == "" {
				return nil, bad("token %q: method %q is not a method name, pattern or %q", e.Name, m, GrantAdmin)
			}
		}
		names[e.Name], hashes[c.hash] = true, true
		creds = append(creds, c)
	}
	return creds, nil
}

// validToken accepts printable ASCII without spaces, so a token fits a
// URL query and an Authorization header unchanged.
func validToken(tok string) error {
	if len(tok) < MinTokenLen || len(tok) > MaxTokenLen {
		return fmt.Errorf("a token must be %d to %d bytes", MinTokenLen, MaxTokenLen)
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] <= ' ' || tok[i] > '~' {
			return errors.New("a token must be printable ASCII without spaces")
		}
	}
	return nil
}

// decodeFileObject decodes one JSON object of a tokens file into the
// struct v points to (DecodeMembers: exact names, no unknown or repeated
// members, types checked, nothing after it). Its errors read "not a JSON
// object", `unknown member "x"`, or the decoder's own; a wrong type comes
// back as the *protocol.FieldError.
func decodeFileObject(raw []byte, v any) error {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return errors.New("not a JSON object")
	}
	fe := DecodeMembers(raw, v)
	switch {
	case fe == nil:
		return nil
	case fe.Err == protocol.ErrSyntax || fe.Err == protocol.ErrTrailingData:
		return errors.New("not a JSON object")
	case fe.Err == protocol.ErrUnknownMember:
		return fmt.Errorf("unknown member %q", fe.Name())
	}
	return fe
}

// Authenticate returns the credential of the token a request presents:
// "Authorization: Bearer <token>", or the URL query's "token" (so a seed
// client changes only its URL). If both are given they must be the same.
func (t *Tokens) Authenticate(r *http.Request) (*Credential, error) {
	tok := r.URL.Query().Get("token")
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, bearer, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return nil, fmt.Errorf("%w: the Authorization header is not \"Bearer <token>\"", ErrBadToken)
		}
		bearer = strings.TrimSpace(bearer)
		if tok != "" && tok != bearer {
			return nil, fmt.Errorf("%w: the header and the URL carry different tokens", ErrBadToken)
		}
		tok = bearer
	}
	if tok == "" {
		return nil, fmt.Errorf("%w: no token (use ?token= or Authorization: Bearer)", ErrBadToken)
	}
	if c := t.lookup(sha256.Sum256([]byte(tok))); c != nil {
		return c, nil
	}
	return nil, ErrBadToken
}

// lookup compares h with every digest in constant time and returns the
// credential it belongs to, or nil.
func (t *Tokens) lookup(h [sha256.Size]byte) *Credential {
	var found *Credential
	for _, c := range *t.table.Load() {
		if subtle.ConstantTimeCompare(c.hash[:], h[:]) == 1 {
			found = c
		}
	}
	return found
}

// Current returns the credential's entry in the set as it is now (after
// any Reload), or nil if its token was removed.
func (c *Credential) Current() *Credential {
	if c == nil || c.set == nil {
		return c
	}
	return c.set.lookup(c.hash)
}

type credentialKey struct{}

// Middleware requires a valid token on every request to next: a request
// without one is answered 401 (with WWW-Authenticate: Bearer), and next
// finds the credential with CredentialFromContext. Wrap a public
// listener's whole handler with it, so the bus and the lobby both need
// the token.
func (t *Tokens) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := t.Authenticate(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="meshagent"`)
			http.Error(w, "rpc: a valid token is required (?token= or Authorization: Bearer)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(ContextWithCredential(r.Context(), c)))
	})
}

// ContextWithCredential returns ctx carrying c.
func ContextWithCredential(ctx context.Context, c *Credential) context.Context {
	return context.WithValue(ctx, credentialKey{}, c)
}

// CredentialFromContext returns the credential Middleware authenticated,
// or nil for an anonymous request.
func CredentialFromContext(ctx context.Context) *Credential {
	c, _ := ctx.Value(credentialKey{}).(*Credential)
	return c
}
