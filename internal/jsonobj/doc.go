// Package jsonobj walks the members of a JSON object that has already been
// validated, in one pass and without copying or decoding the values: the
// hot paths that read a frame (the JSON-RPC envelope, a subscriber's
// answer) need its few members, not a second validating pass of
// encoding/json. A key it cannot take as written (one with an escape or a
// byte beyond ASCII) makes it refuse, and the caller falls back to
// encoding/json, whose decoding it does not repeat.
//
// Valid is that validation: json.Valid's answer in one walk of the bytes,
// without the scanner's call per byte, checked against json.Valid by
// FuzzValid.
package jsonobj
