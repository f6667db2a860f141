module github.com/iwarpd/iwarpd

go 1.26.0

require (
	github.com/google/gopacket v1.1.19
	github.com/sirupsen/logrus v1.10.2
	golang.org/x/sys v0.49.0
)

require golang.org/x/net v0.62.0 // indirect
