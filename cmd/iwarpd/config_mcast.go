package main

import (
	"fmt"
	"net"
	"strconv"

	vcfg "github.com/iwarpd/iwarpd/verbsd/config"
)

// parseMcast reads the -mcast-* flags into the device's multicast policy.
func parseMcast(ifname, ttl, loop string, from func(string) string) (vcfg.McastConfig, error) {
	var m vcfg.McastConfig
	if ifname != "" {
		if _, err := net.InterfaceByName(ifname); err != nil {
			return m, fmt.Errorf("%s %q: %w", from("mcast-if"), ifname, err)
		}
		m.Interface = ifname
	}
	n, err := strconv.Atoi(ttl)
	if err != nil || n < 1 || n > 255 {
		return m, fmt.Errorf("%s %q: want 1..255", from("mcast-ttl"), ttl)
	}
	m.TTL = n
	on, err := strconv.ParseBool(loop)
	if err != nil {
		return m, fmt.Errorf("%s %q: want true or false", from("mcast-loop"), loop)
	}
	m.NoLoop = !on
	return m, nil
}
