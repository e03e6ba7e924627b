package daemon

import (
	"log/slog"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
)

// serviceNotifier speaks systemd's notify protocol when the process runs
// as a Type=notify service (NOTIFY_SOCKET is set); otherwise every method
// does nothing.
type serviceNotifier struct {
	log *slog.Logger
	// watchdog is WatchdogSec (from WATCHDOG_USEC), 0 when off.
	watchdog time.Duration
}

func newServiceNotifier(log *slog.Logger) *serviceNotifier {
	n := &serviceNotifier{log: log}
	d, err := sddaemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("systemd watchdog settings ignored", "err", err)
	}
	n.watchdog = d
	return n
}

// send sends one notification, logging a failure (a service manager that
// cannot be told is not a reason to stop serving).
func (n *serviceNotifier) send(state string) {
	if _, err := sddaemon.SdNotify(false, state); err != nil {
		n.log.Warn("systemd notification not sent", "state", state, "err", err)
	}
}

// ready tells the service manager the node serves (READY=1).
func (n *serviceNotifier) ready(status string) {
	n.send(sddaemon.SdNotifyReady + "\nSTATUS=" + status)
}

// stopping tells it a clean shutdown began (STOPPING=1).
func (n *serviceNotifier) stopping() { n.send(sddaemon.SdNotifyStopping) }

// alive answers the watchdog (WATCHDOG=1).
func (n *serviceNotifier) alive() { n.send(sddaemon.SdNotifyWatchdog) }

// watchdogEvery returns how often to call alive: half of WatchdogSec, as
// sd_watchdog_enabled(3) advises, or 0 when there is no watchdog.
func (n *serviceNotifier) watchdogEvery() time.Duration { return n.watchdog / 2 }
