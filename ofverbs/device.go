package ofverbs

import (
	"errors"

	"golang.org/x/sys/unix"
)

// DeviceInfo describes a device a daemon serves.
type DeviceInfo struct {
	Name   string     // the daemon's device name
	Socket string     // control socket to Open it (WithSocket)
	Daemon string     // daemon version
	Attr   DeviceAttr // its limits
}

// ListDevices returns the device of the daemon at the control socket
// (DefaultSocket, or WithSocket). No daemon listening there (no socket file,
// or nobody accepting) means no devices: an empty list and a nil error. It
// opens a read-only (inspect) session, which needs no resources.
func ListDevices(opts ...Option) ([]DeviceInfo, error) {
	o := buildOptions(opts)
	c, err := open(o, true)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) {
			return nil, nil
		}
		return nil, err
	}
	defer c.Close()
	attr, err := c.QueryDevice()
	if err != nil {
		return nil, err
	}
	name := attr.Name
	if name == "" {
		name = c.hello.Device
	}
	return []DeviceInfo{{Name: name, Socket: o.socket, Daemon: c.hello.Daemon, Attr: attr}}, nil
}
