package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	vcfg "github.com/iwarpd/iwarpd/verbsd/config"
	"io"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/sirupsen/logrus"
)

// loopbackDatagramSize is the datagram size -datagram-size auto picks on a
// loopback address: the loopback MTU (65536) has room for it, one datagram
// carries a 64000-octet message straight into the posted buffer, and big
// datagrams cost fewer headers, iovecs and CRC calls than 1472-octet ones
// even with GSO/GRO (measured: ~1.4x the bandwidth at 64 KiB messages).
const loopbackDatagramSize = 65000

// config is everything iwarpd can be told; it is passed down, never global.
type config struct {
	Socket      string // control socket path
	SocketMode  os.FileMode
	SocketGroup int // gid given to the socket, -1 = leave as created
	LogLevel    logrus.Level
	LogFormat   string // "text" or "json"
	CPUProfile  string // -cpuprofile: pprof CPU profile written on clean shutdown ("" = none)
	Verbs       vcfg.Config
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

// envName is the environment variable of a flag: IWARPD_ and the flag name
// in capitals with dashes as underscores (-max-qp: IWARPD_MAX_QP).
func envName(flagName string) string {
	return "IWARPD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseConfig reads flags, then fills every flag not given on the command
// line from its environment variable, else from the config file (-config /
// IWARPD_CONFIG, a JSON object keyed by flag names), else the default.
func parseConfig(args []string, getenv func(string) string, usageOut io.Writer) (config, error) {
	def := vcfg.DefaultConfig()
	fs := flag.NewFlagSet("iwarpd", flag.ContinueOnError)
	fs.SetOutput(usageOut)
	str := func(name, value, usage string) *string {
		return fs.String(name, value, usage+" (env "+envName(name)+")")
	}
	configFile := str("config", "", "JSON configuration `file`: an object whose keys are flag names")
	socket := str("socket", defaultSocket(), "control socket `path`")
	mode := str("socket-mode", "0660", "permission bits of the control socket, octal")
	group := str("socket-group", "", "group (`name or gid`) given to the control socket; its members may use the daemon")
	level := str("log-level", "info", "log level: panic, fatal, error, warn, info, debug, trace")
	format := str("log-format", "text", "log format: text or json")
	cpuProfile := str("cpuprofile", "", "write a CPU profile (go tool pprof) of the daemon to this `file`, from start to a clean shutdown (SIGTERM/SIGINT)")
	addr := str("addr", def.Addr.String(), "IP `address` the device serves (datagram QPs bind to it); the default suits a single host")
	udPorts := str("ud-ports", portRange(def.UDPorts), "UDP port `range` FIRST-LAST of UD queue pairs")
	rdPorts := str("rd-ports", portRange(def.RDPorts), "UDP port `range` of RD queue pairs")
	listenPorts := str("listen-ports", portRange(def.ListenPorts), "TCP port `range` RC listeners may ask for (port 0 always works); ports below 1024 only for clients allowed to bind them")
	dgramSize := str("datagram-size", "auto", "largest UDP payload sent, `octets` (up to 65507; 1472 fits an MTU of 1500); auto: "+
		strconv.Itoa(loopbackDatagramSize)+" when -addr is a loopback address, else "+strconv.Itoa(def.DatagramSize))
	gso := str("gso", strconv.FormatBool(def.GSO), "send several datagrams per sendmsg with UDP GSO (UDP_SEGMENT): true or false")
	gro := str("gro", strconv.FormatBool(def.GRO), "receive coalesced datagrams with UDP GRO (UDP_GRO): true or false")
	maxMsg := str("max-msg-ud", strconv.Itoa(def.MaxMsgUD), "largest UD message, `octets` (sent as several datagrams)")
	reasm := str("reassembly-timeout", def.ReassemblyTimeout.String(), "drop a partly received UD message after this `duration`")
	partial := str("max-partial", strconv.Itoa(def.MaxPartial), "partly reassembled messages kept per QP")
	pollWindow := str("poll-window", "200us", "keep polling this `duration` after the last work before sleeping")
	idle := str("idle", def.Idle.String(), "how the engine gives its CPU away between passes: adaptive (yield until the CPU is seen contended, then sleep -idle-sleep) or yield (docs/iwarpd.md)")
	idleSleep := str("idle-sleep", def.IdleSleep.String(), "one sleep of -idle adaptive (`duration`, up to 1ms)")
	fpLease := str("fastpath-lease", def.FastpathLease.String(), "a rank reading its UD QP's socket itself (fast-path page) keeps it this `duration` without renewing its lease; then the engine takes the socket over (docs/fastpath.md)")
	stall := str("procmem-stall-timeout", vcfg.DefaultProcMemStallTimeout.String(), "bound (`duration`) on one access to a client's process memory; past it the access fails, the session is marked stalled and its user gets a strike (docs/memory-registration.md)")
	engines := str("engines", strconv.Itoa(def.Engines), "number of engines (`N`, 1..64): threads, each pinned to a CPU, that own the QPs placed on them (docs/engines.md)")
	pollBatch := str("poll-batch", strconv.Itoa(def.PollBatch), "work requests (and datagrams) served per QP per engine pass")
	sockBuf := str("socket-buffer", strconv.Itoa(def.SocketBuffer), "SO_SNDBUF/SO_RCVBUF of datagram sockets, `octets` (0: kernel default); the receive buffer is a UD QP's receive backlog, forced past rmem_max with CAP_NET_ADMIN")
	mpaRev := str("mpa-rev", "2", "MPA `revision` of RC connections: 2 (RFC 6581: IRD/ORD exchange, peer-to-peer) or 1 (RFC 5044)")
	mpaCRC := str("mpa-crc", "preferred", "MPA CRC `policy`: preferred (ask, accept a peer without), required, off (do not ask; still used when the peer asks)")
	mpaMarkers := str("mpa-markers", "false", "ask RC peers to insert MPA markers (true or false)")
	mpaP2P := str("mpa-p2p", "false", "initiators ask for RFC 6581 peer-to-peer mode (true or false)")
	mpaRTR := str("mpa-rtr", "write,read", "RTR `types` offered and accepted in peer-to-peer mode: a list of write, read, send")
	mpaTimeout := str("mpa-timeout", vcfg.DefaultMPATimeout.String(), "bound on TCP connect, the MPA Request/Reply wait and an unanswered connection request (`duration`)")
	rcIRD := str("rc-ird", strconv.Itoa(vcfg.DefaultIRDORD), "default inbound RDMA Read depth of RC QPs (1..128)")
	rcHoldMsgs := str("rc-hold-msgs", strconv.Itoa(def.RCHoldMsgs), "untagged messages an RC QP created with hold_recv (libfabric MSG endpoints) "+
		"keeps in the daemon when they arrive before a receive is posted; past it the QP is terminated (RFC 5040 \"no buffer\")")
	rcHoldBytes := str("rc-hold-bytes", strconv.Itoa(def.RCHoldBytes), "`octets` of those messages per QP (suffixes K, M, G); also counted against -user-max-held-bytes")
	rcORD := str("rc-ord", strconv.Itoa(vcfg.DefaultIRDORD), "default outbound RDMA Read depth of RC QPs (1..128)")
	mcastIf := str("mcast-if", "", "`interface` UD multicast groups are joined on and sent by (default: the one holding -addr)")
	mcastTTL := str("mcast-ttl", "1", "IP TTL of datagrams sent to a multicast group (1..255)")
	rdf := addRDFlags(str, def.RD)          // config_rd.go
	uf := addUserFlags(str, def.UserLimits) // config_user.go
	mcastLoop := str("mcast-loop", "true", "deliver datagrams sent to a multicast group to members on this host too (true or false)")
	l := def.Limits
	intLimits := []struct {
		name, usage string
		def         int
	}{
		{"max-qp", "queue pairs per session", l.MaxQP},
		{"max-cq", "completion queues per session", l.MaxCQ},
		{"max-mr", "memory regions per session", l.MaxMR},
		{"max-pd", "protection domains per session", l.MaxPD},
		{"max-srq", "shared receive queues per session", l.MaxSRQ},
		{"max-comp-channel", "completion channels per session", l.MaxCompChannel},
		{"max-listeners", "RC listeners (TCP listening sockets) per session", l.MaxListeners},
		{"max-qp-wr", "send/receive queue depth", l.MaxQPWR},
		{"max-srq-wr", "shared receive queue depth", l.MaxSRQWR},
		{"max-cqe", "completion queue depth", l.MaxCQE},
		{"max-sge", "scatter/gather elements per work request", l.MaxSGE},
		{"max-inline", "inline octets per send", l.MaxInline},
	}
	intVals := make([]*string, len(intLimits))
	for i, v := range intLimits {
		intVals[i] = str(v.name, strconv.Itoa(v.def), v.usage)
	}
	maxReg := str("max-registered-bytes", strconv.FormatUint(l.MaxRegistered, 10), "registered `octets` per session (suffixes K, M, G)")
	maxMRSize := str("max-mr-size", strconv.FormatUint(l.MaxMRSize, 10), "largest memory region, `octets` (suffixes K, M, G)")
	fs.Usage = func() {
		fmt.Fprintf(usageOut, "usage: iwarpd [flags]\n\n"+
			"iwarpd is the iWARP software RNIC daemon: run one per node.\n"+
			"Every flag can also be set from the environment variable named beside it,\n"+
			"or in the -config file; a flag on the command line wins over the environment,\n"+
			"which wins over the file. See docs/iwarpd.md.\n\nflags:\n")
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
	origin := map[string]string{}
	// The environment first (it may name the config file).
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		env := envName(f.Name)
		if v := getenv(env); v != "" && !given[f.Name] && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", env, v, err)
			}
			origin[f.Name] = env
		}
	})
	if envErr != nil {
		return config{}, envErr
	}
	if *configFile != "" {
		if err := applyFile(fs, *configFile, given, origin); err != nil {
			return config{}, err
		}
	}
	from := func(name string) string {
		if o, ok := origin[name]; ok {
			return o
		}
		return "-" + name
	}

	cfg := config{SocketGroup: -1, Verbs: def}
	cfg.Socket = *socket
	cfg.CPUProfile = *cpuProfile
	if cfg.Socket == "" {
		return config{}, fmt.Errorf("%s must not be empty", from("socket"))
	}
	m, err := strconv.ParseUint(*mode, 8, 32)
	if err != nil || m > 0o777 {
		return config{}, fmt.Errorf("%s %q: want octal permission bits such as 0660", from("socket-mode"), *mode)
	}
	cfg.SocketMode = os.FileMode(m)
	if *group != "" {
		if cfg.SocketGroup, err = lookupGroup(*group); err != nil {
			return config{}, fmt.Errorf("%s: %w", from("socket-group"), err)
		}
	}
	if cfg.LogLevel, err = logrus.ParseLevel(*level); err != nil {
		return config{}, fmt.Errorf("%s: %w", from("log-level"), err)
	}
	cfg.LogFormat = strings.ToLower(*format)
	if cfg.LogFormat != "text" && cfg.LogFormat != "json" {
		return config{}, fmt.Errorf("%s %q: want text or json", from("log-format"), *format)
	}
	v := &cfg.Verbs
	if v.Addr, err = netip.ParseAddr(*addr); err != nil {
		return config{}, fmt.Errorf("%s: %w", from("addr"), err)
	}
	v.Addr = v.Addr.Unmap()
	if v.UDPorts, err = parsePortRange(*udPorts); err != nil {
		return config{}, fmt.Errorf("%s: %w", from("ud-ports"), err)
	}
	if v.RDPorts, err = parsePortRange(*rdPorts); err != nil {
		return config{}, fmt.Errorf("%s: %w", from("rd-ports"), err)
	}
	if v.ListenPorts, err = parsePortRange(*listenPorts); err != nil {
		return config{}, fmt.Errorf("%s: %w", from("listen-ports"), err)
	}
	ints := []struct {
		name string
		s    *string
		dst  *int
	}{{"max-msg-ud", maxMsg, &v.MaxMsgUD},
		{"max-partial", partial, &v.MaxPartial}, {"rc-hold-msgs", rcHoldMsgs, &v.RCHoldMsgs}, {"poll-batch", pollBatch, &v.PollBatch}, {"engines", engines, &v.Engines}, {"socket-buffer", sockBuf, &v.SocketBuffer}}
	dsts := []*int{&v.Limits.MaxQP, &v.Limits.MaxCQ, &v.Limits.MaxMR, &v.Limits.MaxPD, &v.Limits.MaxSRQ,
		&v.Limits.MaxCompChannel, &v.Limits.MaxListeners, &v.Limits.MaxQPWR, &v.Limits.MaxSRQWR, &v.Limits.MaxCQE, &v.Limits.MaxSGE, &v.Limits.MaxInline}
	for i, il := range intLimits {
		ints = append(ints, struct {
			name string
			s    *string
			dst  *int
		}{il.name, intVals[i], dsts[i]})
	}
	for _, it := range ints {
		n, err := strconv.Atoi(*it.s)
		if err != nil {
			return config{}, fmt.Errorf("%s %q: want an integer", from(it.name), *it.s)
		}
		*it.dst = n
	}
	switch {
	case *dgramSize == "auto" && v.Addr.IsLoopback():
		v.DatagramSize = loopbackDatagramSize
	case *dgramSize == "auto":
		v.DatagramSize = def.DatagramSize
	default:
		if v.DatagramSize, err = strconv.Atoi(*dgramSize); err != nil {
			return config{}, fmt.Errorf("%s %q: want an integer or auto", from("datagram-size"), *dgramSize)
		}
	}
	for _, b := range []struct {
		name string
		s    *string
		dst  *bool
	}{{"gso", gso, &v.GSO}, {"gro", gro, &v.GRO}} {
		if *b.dst, err = strconv.ParseBool(*b.s); err != nil {
			return config{}, fmt.Errorf("%s %q: want true or false", from(b.name), *b.s)
		}
	}
	if v.Limits.MaxRegistered, err = parseSize(*maxReg); err != nil {
		return config{}, fmt.Errorf("%s: %w", from("max-registered-bytes"), err)
	}
	if v.Limits.MaxMRSize, err = parseSize(*maxMRSize); err != nil {
		return config{}, fmt.Errorf("%s: %w", from("max-mr-size"), err)
	}
	hb, err := parseSize(*rcHoldBytes)
	if err != nil || hb > 1<<30 {
		return config{}, fmt.Errorf("%s %q: want octets up to 1G, optionally with K, M or G", from("rc-hold-bytes"), *rcHoldBytes)
	}
	v.RCHoldBytes = int(hb)
	for _, d := range []struct {
		name string
		s    *string
		dst  *time.Duration
	}{{"poll-window", pollWindow, &v.PollWindow}, {"idle-sleep", idleSleep, &v.IdleSleep}, {"fastpath-lease", fpLease, &v.FastpathLease}, {"reassembly-timeout", reasm, &v.ReassemblyTimeout},
		{"procmem-stall-timeout", stall, &v.ProcMemStallTimeout}} {
		if *d.dst, err = time.ParseDuration(*d.s); err != nil {
			return config{}, fmt.Errorf("%s: %w", from(d.name), err)
		}
	}
	if v.Idle, err = vcfg.ParseIdleMode(*idle); err != nil {
		return config{}, fmt.Errorf("%s: %w", from("idle"), err)
	}
	if v.MPA, err = parseMPA(*mpaRev, *mpaCRC, *mpaMarkers, *mpaP2P, *mpaRTR, *mpaTimeout, *rcIRD, *rcORD, from); err != nil {
		return config{}, err
	}
	if v.Mcast, err = parseMcast(*mcastIf, *mcastTTL, *mcastLoop, from); err != nil { // config_mcast.go
		return config{}, err
	}
	if v.RD, err = parseRD(rdf, def.RD, from); err != nil { // config_rd.go
		return config{}, err
	}
	if v.UserLimits, err = parseUser(uf, from); err != nil { // config_user.go
		return config{}, err
	}
	if err := v.Validate(); err != nil {
		return config{}, err
	}
	return cfg, nil
}

// parseMPA reads the -mpa-* and -rc-* flags into the device's MPA policy.
func parseMPA(rev, crc, markers, p2p, rtr, timeout, ird, ord string, from func(string) string) (vcfg.MPAConfig, error) {
	var m vcfg.MPAConfig
	switch rev {
	case "1", "2":
		m.Revision = rev[0] - '0'
	default:
		return m, fmt.Errorf("%s %q: want 1 or 2", from("mpa-rev"), rev)
	}
	var err error
	if m.CRC, err = proto.ParseMPACRC(crc); err != nil {
		return m, fmt.Errorf("%s: %w", from("mpa-crc"), err)
	}
	if m.Markers, err = strconv.ParseBool(markers); err != nil {
		return m, fmt.Errorf("%s %q: want true or false", from("mpa-markers"), markers)
	}
	if m.PeerToPeer, err = strconv.ParseBool(p2p); err != nil {
		return m, fmt.Errorf("%s %q: want true or false", from("mpa-p2p"), p2p)
	}
	for _, t := range strings.Split(rtr, ",") {
		switch strings.TrimSpace(t) {
		case "write":
			m.RTR |= proto.RTRWrite
		case "read":
			m.RTR |= proto.RTRRead
		case "send":
			m.RTR |= proto.RTRSend
		default:
			return m, fmt.Errorf("%s %q: want a list of write, read, send", from("mpa-rtr"), rtr)
		}
	}
	if m.Timeout, err = time.ParseDuration(timeout); err != nil || m.Timeout <= 0 {
		return m, fmt.Errorf("%s %q: want a positive duration such as 10s", from("mpa-timeout"), timeout)
	}
	for _, d := range []struct {
		name, s string
		dst     *uint16
	}{{"rc-ird", ird, &m.IRD}, {"rc-ord", ord, &m.ORD}} {
		n, err := strconv.Atoi(d.s)
		if err != nil || n < 1 || n > vcfg.MaxIRDORD {
			return m, fmt.Errorf("%s %q: want 1..%d", from(d.name), d.s, vcfg.MaxIRDORD)
		}
		*d.dst = uint16(n)
	}
	if m.PeerToPeer && m.Revision == 1 {
		return m, fmt.Errorf("%s needs -mpa-rev 2", from("mpa-p2p"))
	}
	return m, m.Validate()
}

// retiredKeys are flags that existed once: in a config file they get an
// error saying so (like any unknown key, they stop the daemon: a limit
// that silently means nothing would mislead).
var retiredKeys = map[string]string{
	"max-ah": "address handles are the client's since ABI 2: no daemon state, no limit",
}

// applyFile sets every flag named in the JSON config file that neither the
// command line nor the environment set.
func applyFile(fs *flag.FlagSet, path string, given map[string]bool, origin map[string]string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var kv map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&kv); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if why, ok := retiredKeys[k]; ok {
			return fmt.Errorf("config file %s: key %q is no longer used (%s): remove it", path, k, why)
		}
		if k == "config" || fs.Lookup(k) == nil {
			return fmt.Errorf("config file %s: unknown key %q (keys are flag names; see iwarpd -h)", path, k)
		}
		if given[k] || origin[k] != "" {
			continue
		}
		var s string
		if err := json.Unmarshal(kv[k], &s); err != nil {
			var n json.Number
			d := json.NewDecoder(bytes.NewReader(kv[k]))
			d.UseNumber()
			if err := d.Decode(&n); err != nil {
				return fmt.Errorf("config file %s: %q: want a string or a number", path, k)
			}
			s = n.String()
		}
		if err := fs.Set(k, s); err != nil {
			return fmt.Errorf("config file %s: %q: %w", path, k, err)
		}
		origin[k] = fmt.Sprintf("%s key %q", path, k)
	}
	return nil
}

func portRange(r dgram.PortRange) string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

func parsePortRange(s string) (dgram.PortRange, error) {
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.ParseUint(a, 10, 16)
	last, err2 := strconv.ParseUint(b, 10, 16)
	if !ok || err1 != nil || err2 != nil || first > last {
		return dgram.PortRange{}, fmt.Errorf("port range %q: want FIRST-LAST, e.g. 17000-17499", s)
	}
	return dgram.PortRange{First: uint16(first), Last: uint16(last)}, nil
}

func parseSize(s string) (uint64, error) {
	mult := uint64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, s[:len(s)-1]
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > (1<<63)/mult {
		return 0, fmt.Errorf("size %q: want octets, optionally with K, M or G", s)
	}
	return n * mult, nil
}

func lookupGroup(s string) (int, error) {
	if n, err := strconv.Atoi(s); err == nil && n >= 0 {
		return n, nil
	}
	g, err := user.LookupGroup(s)
	if err != nil {
		return -1, err
	}
	return strconv.Atoi(g.Gid)
}
