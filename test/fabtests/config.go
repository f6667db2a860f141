package fabtests

// Config is one column of the table: the -p value every test gets, the
// environment added to it, and the endpoint types it runs ("" in EPs: the
// unit tests that open no typed endpoint; nil EPs: every test).
type Config struct {
	Name  string
	Prov  string   // -p
	Env   []string // added to the test processes' environment
	EPs   []string // endpoint types run (nil: all)
	Ref   bool     // a reference provider (not iwarpd)
	Iwarp bool     // needs the iwarpd daemon and provider
	// Reference is the configuration running the same utility provider
	// over libfabric's own core provider; a failure both have, the same
	// way in the same run, is the utility provider's (Classify).
	Reference string
}

// native hides the utility providers, so that -p iwarpd is the provider's
// own endpoints (docs/libfabric.md "Which endpoint runs").
const native = "FI_PROVIDER=^ofi_rxm,ofi_rxd"

// Configs are issue 19's configurations, in the table's order.
var Configs = []Config{
	{Name: "tcp", Prov: "tcp", Ref: true},
	{Name: "udp;ofi_rxd", Prov: "udp;ofi_rxd", Ref: true},
	{Name: "iwarpd", Prov: "iwarpd", Iwarp: true},
	{Name: "native RDM", Prov: "iwarpd", Env: []string{native}, EPs: []string{"rdm", ""}, Iwarp: true},
	{Name: "MSG", Prov: "iwarpd", Env: []string{native}, EPs: []string{"msg", ""}, Iwarp: true},
	{Name: "DGRAM", Prov: "iwarpd", Env: []string{native}, EPs: []string{"dgram", ""}, Iwarp: true},
	{Name: "iwarpd;ofi_rxm", Prov: "iwarpd;ofi_rxm", Iwarp: true},
	{Name: "iwarpd;ofi_rxd", Prov: "iwarpd;ofi_rxd", Iwarp: true, Reference: "udp;ofi_rxd"},
}

// ConfigByName returns the configuration called name.
func ConfigByName(name string) (Config, bool) {
	for _, c := range Configs {
		if c.Name == name {
			return c, true
		}
	}
	return Config{}, false
}

// Runs reports whether c runs t.
func (c Config) Runs(t Test) bool {
	if c.EPs == nil {
		return true
	}
	for _, ep := range c.EPs {
		if ep == t.EP {
			return true
		}
	}
	return false
}
