// Package config is the daemon's configuration: the device attributes and
// per-session limits (Limits), the per-user limits (UserLimits), and the
// policies of each transport (RDConfig, MPAConfig, McastConfig), with their
// defaults and validation. It is the leaf every verbsd package reads its
// settings from; it holds values and checks, no behaviour (cmd/iwarpd maps
// flags, environment and the JSON file onto Config; docs/iwarpd.md lists
// every key).
package config
