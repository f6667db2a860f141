package main

import (
	"fmt"
	"strconv"

	vcfg "github.com/iwarpd/iwarpd/verbsd/config"
)

// userFlags are the -user-max-* flags (docs/iwarpd.md "Limits per user"),
// as given.
type userFlags struct {
	sessions, registered, qps, ports, listeners, held *string
}

// addUserFlags registers the -user-max-* flags with defaults from def.
func addUserFlags(str func(name, value, usage string) *string, def vcfg.UserLimits) userFlags {
	return userFlags{
		sessions:   str("user-max-sessions", strconv.Itoa(def.Sessions), "sessions of one Unix user, all clients together (0: no limit)"),
		registered: str("user-max-registered-bytes", strconv.FormatUint(def.Registered, 10), "registered `octets` of one Unix user, all sessions together (suffixes K, M, G; 0: no limit)"),
		qps:        str("user-max-qp", strconv.Itoa(def.QPs), "queue pairs of one Unix user, all sessions together (0: no limit)"),
		ports:      str("user-max-ports", strconv.Itoa(def.Ports), "UDP ports held by datagram QPs of one Unix user (0: no limit)"),
		listeners:  str("user-max-listeners", strconv.Itoa(def.Listeners), "RC listeners of one Unix user (0: no limit)"),
		held: str("user-max-held-bytes", strconv.FormatUint(def.Held, 10), "`octets` of RC messages the daemon holds for one Unix user's QPs "+
			"until a receive is posted (-rc-hold-bytes per QP; suffixes K, M, G; 0: no limit)"),
	}
}

// parseUser reads the -user-max-* flags.
func parseUser(f userFlags, from func(string) string) (vcfg.UserLimits, error) {
	var l vcfg.UserLimits
	for _, it := range []struct {
		name string
		s    *string
		dst  *int
	}{{"user-max-sessions", f.sessions, &l.Sessions}, {"user-max-qp", f.qps, &l.QPs},
		{"user-max-ports", f.ports, &l.Ports}, {"user-max-listeners", f.listeners, &l.Listeners}} {
		n, err := strconv.Atoi(*it.s)
		if err != nil || n < 0 {
			return l, fmt.Errorf("%s %q: want an integer >= 0 (0: no limit)", from(it.name), *it.s)
		}
		*it.dst = n
	}
	var err error
	if l.Registered, err = parseSize(*f.registered); err != nil {
		return l, fmt.Errorf("%s: %w", from("user-max-registered-bytes"), err)
	}
	if l.Held, err = parseSize(*f.held); err != nil {
		return l, fmt.Errorf("%s: %w", from("user-max-held-bytes"), err)
	}
	return l, nil
}
