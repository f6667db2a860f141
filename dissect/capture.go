package dissect

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// packetSource is what pcapgo's pcap and pcapng readers have in common.
type packetSource interface {
	ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	LinkType() layers.LinkType
}

const pcapngMagic = 0x0a0d0d0a

// openCapture returns a reader for a pcap or pcapng stream, chosen by its
// magic number.
func openCapture(r io.Reader) (packetSource, error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("dissect: reading capture header: %w", err)
	}
	if binary.LittleEndian.Uint32(magic) == pcapngMagic {
		ng, err := pcapgo.NewNgReader(br, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			return nil, fmt.Errorf("dissect: pcapng: %w", err)
		}
		return ng, nil
	}
	pr, err := pcapgo.NewReader(br)
	if err != nil {
		return nil, fmt.Errorf("dissect: pcap: %w", err)
	}
	return pr, nil
}

// Decode reads a whole pcap or pcapng capture from r, passing every Event
// to emit, and returns the number of violations.
func Decode(r io.Reader, cfg Config, emit func(*Event)) (int, error) {
	src, err := openCapture(r)
	if err != nil {
		return 0, err
	}
	d := NewDecoder(cfg, emit)
	lt := src.LinkType()
	for frame := 1; ; frame++ {
		data, ci, err := src.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			d.Close()
			return d.Violations(), fmt.Errorf("dissect: frame %d: %w", frame, err)
		}
		d.Packet(frame, ci, data, lt)
	}
	d.Close()
	return d.Violations(), nil
}

// DecodeFile is Decode on the named file; Config.File is set to path.
func DecodeFile(path string, cfg Config, emit func(*Event)) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("dissect: %w", err)
	}
	defer f.Close()
	cfg.File = path
	return Decode(f, cfg, emit)
}
