// Command iwarpd is the iWARP software RNIC daemon, one per node. It owns
// the control socket that ofverbs clients connect to and runs the verbs
// service (package verbsd): sessions, shared-memory queues and the polling
// engine that carries UD queue pairs over UDP. Flags, environment variables
// and the config file: iwarpd -h and docs/iwarpd.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/iwarpd/iwarpd/verbsd"
	"github.com/sirupsen/logrus"
)

// version is set at link time (-ldflags "-X main.version=...").
var version = "dev"

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
	stopProfile, err := startCPUProfile(cfg.CPUProfile)
	if err != nil {
		log.WithError(err).Error("cannot start")
		return 1
	}
	cfg.Verbs.Version = version
	cfg.Verbs.Log = log

	srv, err := verbsd.NewServer(cfg.Verbs)
	if err != nil {
		log.WithError(err).Error("cannot start")
		return 1
	}
	// Catch the signals before the socket exists: a client (or a test)
	// that sees the socket may signal at once.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	l, err := listenControl(cfg.Socket, cfg.SocketMode, cfg.SocketGroup)
	if err != nil {
		srv.Close()
		log.WithError(err).Error("cannot start")
		return 1
	}
	v := cfg.Verbs
	log.WithFields(logrus.Fields{
		"socket": cfg.Socket, "mode": fmt.Sprintf("%#o", cfg.SocketMode), "addr": v.Addr.String(),
		"ud_ports": portRange(v.UDPorts), "datagram_size": v.DatagramSize, "poll_window": v.PollWindow.String(),
		"engines": max(v.Engines, 1),
	}).Info("iwarpd started")

	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil {
			log.WithError(err).Warn("control socket")
		}
	}()

	sig := <-signals
	log.WithField("signal", sig.String()).Info("shutting down")
	l.Close()
	<-done
	srv.Close() // every client gets EventDeviceFatal, then its connection closes
	if err := removeIfSocket(cfg.Socket); err != nil {
		log.WithError(err).Warn("could not remove the control socket; the next start replaces it")
	}
	if err := stopProfile(); err != nil {
		log.WithError(err).Warn("CPU profile")
	}
	log.Info("iwarpd stopped")
	return 0
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
