// Command iwarpd is the iWARP software RNIC daemon, one per node. It owns
// the control socket that ofverbs clients connect to.
//
// This build lays down the daemon's life cycle (configuration, control
// socket, signals, logging); the verbs service behind the socket comes with
// package verbsd. Flags and environment variables: iwarpd -h and
// docs/iwarpd.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/sirupsen/logrus"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cfg, err := parseConfig(args, os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "iwarpd: %v\n", err)
		return 2
	}
	log := newLogger(cfg)

	l, err := listenControl(cfg.Socket, cfg.SocketMode)
	if err != nil {
		log.WithError(err).Error("cannot start")
		return 1
	}
	log.WithFields(logrus.Fields{"socket": cfg.Socket, "mode": fmt.Sprintf("%#o", cfg.SocketMode)}).Info("iwarpd started")

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan struct{})
	go acceptLoop(l, log, done)

	sig := <-signals
	log.WithField("signal", sig.String()).Info("shutting down")
	l.Close()
	<-done
	if err := removeIfSocket(cfg.Socket); err != nil {
		log.WithError(err).Warn("could not remove the control socket; the next start replaces it")
	}
	log.Info("iwarpd stopped")
	return 0
}

// acceptLoop serves control connections until l is closed. Until the verbs
// service exists, a client is told so and disconnected.
func acceptLoop(l *net.UnixListener, log *logrus.Logger, done chan<- struct{}) {
	defer close(done)
	for {
		conn, err := l.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			log.WithError(err).Warn("accepting a control connection failed")
			continue
		}
		log.Debug("control connection refused: verbs service not built into this iwarpd")
		conn.Close()
	}
}

func removeIfSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s is no longer a socket; left in place", path)
	}
	return os.Remove(path)
}

func newLogger(cfg config) *logrus.Logger {
	log := logrus.New()
	log.SetOutput(os.Stderr)
	log.SetLevel(cfg.LogLevel)
	if cfg.LogFormat == "json" {
		log.SetFormatter(&logrus.JSONFormatter{})
	}
	return log
}
