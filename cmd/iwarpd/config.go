package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"
)

// config is everything iwarpd can be told; it is passed down, never global.
type config struct {
	Socket     string // control socket path
	SocketMode os.FileMode
	LogLevel   logrus.Level
	LogFormat  string // "text" or "json"
}

// defaultSocket is /run/iwarpd/iwarpd.sock for root, else under
// $XDG_RUNTIME_DIR (or the temporary directory when that is unset).
func defaultSocket() string {
	if os.Geteuid() == 0 {
		return "/run/iwarpd/iwarpd.sock"
	}
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
		return filepath.Join(dir, "iwarpd", "iwarpd.sock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("iwarpd-%d", os.Geteuid()), "iwarpd.sock")
}

// envOverrides maps flags to the environment variables that set them.
var envOverrides = map[string]string{
	"socket":      "IWARPD_SOCKET",
	"socket-mode": "IWARPD_SOCKET_MODE",
	"log-level":   "IWARPD_LOG_LEVEL",
	"log-format":  "IWARPD_LOG_FORMAT",
}

// parseConfig reads flags, then applies environment variables to every flag
// not given on the command line (flags win over the environment).
func parseConfig(args []string, getenv func(string) string, usageOut io.Writer) (config, error) {
	fs := flag.NewFlagSet("iwarpd", flag.ContinueOnError)
	fs.SetOutput(usageOut)
	socket := fs.String("socket", defaultSocket(), "control socket `path` (env IWARPD_SOCKET)")
	mode := fs.String("socket-mode", "0660", "permission bits of the control socket, octal (env IWARPD_SOCKET_MODE)")
	level := fs.String("log-level", "info", "log level: panic, fatal, error, warn, info, debug, trace (env IWARPD_LOG_LEVEL)")
	format := fs.String("log-format", "text", "log format: text or json (env IWARPD_LOG_FORMAT)")
	fs.Usage = func() {
		fmt.Fprintf(usageOut, "usage: iwarpd [flags]\n\n"+
			"iwarpd is the iWARP software RNIC daemon: run one per node.\n"+
			"Every flag can also be set from the environment variable named beside it;\n"+
			"a flag on the command line wins. See docs/iwarpd.md.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q (iwarpd takes only flags; see iwarpd -h)", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	// origin names where each setting came from, for error messages.
	fromEnv := map[string]string{}
	for name, env := range envOverrides {
		if v := getenv(env); v != "" && !given[name] {
			if err := fs.Set(name, v); err != nil {
				return config{}, fmt.Errorf("%s=%q: %w", env, v, err)
			}
			fromEnv[name] = env
		}
	}
	origin := func(name string) string {
		if env, ok := fromEnv[name]; ok {
			return env
		}
		return "-" + name
	}

	var cfg config
	cfg.Socket = *socket
	if cfg.Socket == "" {
		return config{}, fmt.Errorf("%s must not be empty", origin("socket"))
	}
	m, err := strconv.ParseUint(*mode, 8, 32)
	if err != nil || m > 0o777 {
		return config{}, fmt.Errorf("%s %q: want octal permission bits such as 0660", origin("socket-mode"), *mode)
	}
	cfg.SocketMode = os.FileMode(m)
	cfg.LogLevel, err = logrus.ParseLevel(*level)
	if err != nil {
		return config{}, fmt.Errorf("%s: %w", origin("log-level"), err)
	}
	cfg.LogFormat = strings.ToLower(*format)
	if cfg.LogFormat != "text" && cfg.LogFormat != "json" {
		return config{}, fmt.Errorf("%s %q: want text or json", origin("log-format"), *format)
	}
	return cfg, nil
}
