package cli

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/libp2p/go-libp2p/core/crypto"
	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/sign"
)

// idOutput is the --json output of `meshagent id`.
type idOutput struct {
	AgentID   string `json:"agentId"`
	PublicKey string `json:"publicKey"`
	KeyFile   string `json:"keyFile"`
	Created   bool   `json:"created"`
}

func (r *runState) idCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "id",
		Usage: "create the identity if missing; print its agent id and public key (with --api: a running node's, and its addresses)",
		Description: "The identity is an Ed25519 key in a file with mode 0600 (DIR/identity.key unless --key " +
			"says otherwise). The agent id is its libp2p peer ID; the public key is the base64 form " +
			"AgentProtocol also accepts as an agent id. A key file that other users can read is refused. " +
			"With --api ADDR on the command line it asks the running node there instead, and prints its " +
			"listen addresses too (--json: {\"agentId\",\"publicKey\",\"addrs\"}), the addresses another " +
			"node passes to --bootstrap or `meshagent connect`.",
		Flags: []ucli.Flag{
			keyFlag(),
			stringFlag(flagAPI, "", "`ADDR` (host:port) of a running node's local API to ask instead of reading the key"),
			jsonFlag(`print {"agentId","publicKey","keyFile","created"} as one JSON line`),
		},
		Action: r.runID,
	}
}

func (r *runState) runID(c *ucli.Context) error {
	if err := r.noArgs(c); err != nil {
		return err
	}
	if r.onCommandLine(flagAPI) {
		if r.onCommandLine(flagKey) {
			return usageErrorf("id takes --key (read a key file) or --api (ask a running node), not both")
		}
		return r.runIDFromAPI(c)
	}
	path, err := r.keyPath(c)
	if err != nil {
		return err
	}
	k, created, err := loadOrCreateKey(path)
	if err != nil {
		return err
	}
	id, err := sign.AgentID(k.GetPublic())
	if err != nil {
		return exitErrorf(ExitFailure, "key %s: %v", path, err)
	}
	pub, err := sign.PublicKeyBase64(id)
	if err != nil {
		return exitErrorf(ExitFailure, "key %s: %v", path, err)
	}
	if c.Bool(flagJSON) {
		return writeJSONLine(r.stdout, idOutput{AgentID: id.String(), PublicKey: pub, KeyFile: path, Created: created})
	}
	if created {
		r.stderr.printf("created a new identity in %s\n", path)
	}
	_, err = fmt.Fprintf(r.stdout, "agent id:   %s\npublic key: %s\n", id, pub)
	return err
}

// loadOrCreateKey loads the identity at path, creating it if missing, and
// turns the errors people can fix into messages that say how.
func loadOrCreateKey(path string) (crypto.PrivKey, bool, error) {
	k, created, err := sign.LoadOrCreateKey(path)
	if err != nil {
		return nil, false, keyError(path, err)
	}
	return k, created, nil
}

// loadKey loads an existing identity.
func loadKey(path string) (crypto.PrivKey, error) {
	k, err := sign.LoadKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, exitErrorf(ExitFailure, "identity key %s does not exist; create it with `meshagent id --key %s`, or pass --key", path, path)
	}
	if err != nil {
		return nil, keyError(path, err)
	}
	return k, nil
}

func keyError(path string, err error) error {
	var perm *sign.KeyPermissionError
	switch {
	case errors.As(err, &perm):
		return exitErrorf(ExitFailure, "refusing to use identity key %s: it has mode %04o, so other users can read it; "+
			"run `chmod 600 %s`, or pass --key to use another file", path, perm.Mode.Perm(), path)
	case errors.Is(err, sign.ErrUnsupportedKey):
		return exitErrorf(ExitFailure, "identity key %s is not an Ed25519 key; pass --key with a key made by `meshagent id`", path)
	}
	return exitErrorf(ExitFailure, "identity key %s: %v", path, err)
}

// noArgs refuses positional arguments for commands that take none.
func (r *runState) noArgs(c *ucli.Context) error {
	if len(r.positional) > 0 {
		return usageErrorf("unexpected argument %q; run `meshagent %s --help` for usage", r.positional[0], c.Command.Name)
	}
	return nil
}
