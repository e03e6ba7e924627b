package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// maxEnvelopeInput bounds what sign and verify read from stdin.
const maxEnvelopeInput = protocol.DefaultMaxFrameSize

func (r *runState) signCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "sign",
		Usage: "sign an AgentProtocol envelope read on stdin; print it with its signature",
		Description: "Reads one envelope (JSON) on stdin and prints it signed, in canonical JSON with a " +
			"\"signature\" member, on one line. from.agentId is set to the key's agent id; an envelope " +
			"whose from.agentId names another agent is refused. protocol, id and timestamp are filled " +
			"in when absent (agentprotocol/0.1, a new UUID, the current time) and kept when present. " +
			"type, payload and, except for hello and notify, to.agentId must be given. Any existing " +
			"signature is replaced.",
		Flags:  []ucli.Flag{keyFlag()},
		Action: r.runSign,
	}
}

func (r *runState) verifyCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "verify",
		Usage: "check a signed AgentProtocol envelope read on stdin",
		Description: "Reads one envelope in the signed JSON form on stdin and exits 0, printing " +
			"\"valid: signed by <agent id>\", only if it is well formed, its signature verifies and " +
			"from.agentId is the signing key. Otherwise it says why and exits 3 (malformed: " +
			"INVALID_MESSAGE) or 4 (bad signature or key mismatch: INVALID_SIGNATURE). Timestamps " +
			"are not checked against the clock: this is offline verification. With --provider or " +
			"--correlation-id it checks a delivery receipt (`meshagent call --receipt`; the call's " +
			"--json line carrying one is accepted too): a final response envelope, signed by the " +
			"provider (else exit 4), answering that request (else exit 3); it prints \"valid: receipt " +
			"signed by <agent id> for request <id> (<status>)\". Give --provider: a signature only " +
			"proves something when its signer is the one expected.",
		Flags:  verifyReceiptFlags(),
		Action: r.runVerify,
	}
}

func (r *runState) runSign(c *ucli.Context) error {
	if err := r.noArgs(c); err != nil {
		return err
	}
	path, err := r.keyPath(c)
	if err != nil {
		return err
	}
	k, err := loadKey(path)
	if err != nil {
		return err
	}
	signer, err := sign.NewSigner(k)
	if err != nil {
		return exitErrorf(ExitFailure, "identity key %s: %v", path, err)
	}
	doc, err := readEnvelopeInput(c.App.Reader)
	if err != nil {
		return err
	}
	env, err := decodeUnsigned(doc)
	if err != nil {
		return err
	}
	if env.From.AgentID != "" {
		claimed, err := sign.ParseAgentID(env.From.AgentID)
		if err != nil {
			return exitErrorf(ExitCodeFor(protocol.CodeInvalidMessage), "sign: from.agentId: %v", err)
		}
		if claimed != signer.ID() {
			return exitErrorf(ExitCodeFor(protocol.CodeInvalidMessage),
				"sign: from.agentId is %s but the key %s is agent %s; remove from.agentId or sign with that agent's key",
				claimed, path, signer.ID())
		}
	}
	if env.Protocol == "" {
		env.Protocol = protocol.Version
	}
	if env.ID == "" {
		env.ID = protocol.NewID()
	}
	if env.Timestamp == "" {
		env.Timestamp = protocol.FormatTime(time.Now())
	}
	body, sig, err := protocol.Seal(signer, env)
	if err != nil {
		return envelopeError("sign", err)
	}
	signed, err := protocol.SignedJSON(body, sig)
	if err != nil {
		return envelopeError("sign", err)
	}
	_, err = fmt.Fprintf(r.stdout, "%s\n", signed)
	return err
}

func (r *runState) runVerify(c *ucli.Context) error {
	if err := r.noArgs(c); err != nil {
		return err
	}
	want, isReceipt, err := r.receiptWanted(c)
	if err != nil {
		return err
	}
	doc, err := readEnvelopeInput(c.App.Reader)
	if err != nil {
		return err
	}
	if isReceipt {
		return r.verifyReceipt(doc, want)
	}
	env, _, err := protocol.OpenJSON(doc)
	if err != nil {
		pe := protocol.AsError(err)
		return &ExitError{Code: ExitCodeFor(pe.Code), Err: fmt.Errorf("not valid: %s: %s", pe.Code, pe.Message)}
	}
	from, err := env.Sender()
	if err != nil {
		return envelopeError("verify", err)
	}
	_, err = fmt.Fprintf(r.stdout, "valid: signed by %s\n", from)
	return err
}

// readEnvelopeInput reads one JSON document from in, bounded in size.
func readEnvelopeInput(in io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(in, maxEnvelopeInput+1))
	if err != nil {
		return nil, exitErrorf(ExitFailure, "read stdin: %v", err)
	}
	if len(data) > maxEnvelopeInput {
		return nil, exitErrorf(ExitCodeFor(protocol.CodeInvalidMessage), "the envelope on stdin is larger than %d bytes", maxEnvelopeInput)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, exitErrorf(ExitCodeFor(protocol.CodeInvalidMessage), "no envelope on stdin; pipe one in, e.g. `meshagent sign < msg.json`")
	}
	return data, nil
}

// decodeUnsigned parses an envelope to sign. Duplicate keys and invalid
// JSON are refused (as a receiver would), and so are members that are not
// part of an envelope, so that nothing is dropped silently.
func decodeUnsigned(doc []byte) (*protocol.Envelope, error) {
	canon, err := canonicalInput(doc)
	if err != nil {
		return nil, exitErrorf(ExitCodeFor(protocol.CodeInvalidMessage), "sign: the input is not a valid JSON envelope: %v", err)
	}
	var env protocol.Envelope
	if err := protocol.DecodeStrict(canon, &env); err != nil {
		return nil, exitErrorf(ExitCodeFor(protocol.CodeInvalidMessage), "sign: the input is not an envelope: %v", err)
	}
	return &env, nil
}

// envelopeError gives an envelope error its code's exit status.
func envelopeError(op string, err error) error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return &ExitError{Code: ExitCodeFor(pe.Code), Err: fmt.Errorf("%s: %s: %s", op, pe.Code, pe.Message)}
	}
	return exitErrorf(ExitFailure, "%s: %v", op, err)
}
