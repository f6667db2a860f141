package dissect

import (
	"github.com/google/gopacket"
)

// Layer type numbers. gopacket reserves 1000–1999 for application layers;
// iwarpd uses 1400–1405. This is the one place dissect registers anything.
const (
	layerNumMPAFrame   = 1400
	layerNumMPAFPDU    = 1401
	layerNumDDP        = 1402
	layerNumRDMAP      = 1403
	layerNumDatagramUD = 1404
	layerNumDatagramRD = 1405
)

// The registered layer types. Each type's registered Decoder is the default
// one: MPAFPDU assumes CRC on and no markers at stream position 0 (use an
// FPDUDecoder for other settings); DatagramUD and DatagramRD check the CRC
// trailer (use a DatagramDecoder to skip it).
var (
	LayerTypeMPAFrame = gopacket.RegisterLayerType(layerNumMPAFrame,
		gopacket.LayerTypeMetadata{Name: "MPAFrame", Decoder: gopacket.DecodeFunc(decodeMPAFrame)})
	LayerTypeMPAFPDU = gopacket.RegisterLayerType(layerNumMPAFPDU,
		gopacket.LayerTypeMetadata{Name: "MPAFPDU", Decoder: FPDUDecoder{CRC: true}})
	LayerTypeDDP = gopacket.RegisterLayerType(layerNumDDP,
		gopacket.LayerTypeMetadata{Name: "DDP", Decoder: gopacket.DecodeFunc(decodeDDP)})
	LayerTypeRDMAP = gopacket.RegisterLayerType(layerNumRDMAP,
		gopacket.LayerTypeMetadata{Name: "RDMAP", Decoder: gopacket.DecodeFunc(decodeRDMAPAlone)})
	LayerTypeDatagramUD = gopacket.RegisterLayerType(layerNumDatagramUD,
		gopacket.LayerTypeMetadata{Name: "DatagramUD", Decoder: DatagramDecoder{CheckCRC: true}})
	LayerTypeDatagramRD = gopacket.RegisterLayerType(layerNumDatagramRD,
		gopacket.LayerTypeMetadata{Name: "DatagramRD", Decoder: DatagramDecoder{RD: true, CheckCRC: true}})
)

// decodeInto runs a DecodingLayer on data and hands the packet builder on to
// the next layer, the way gopacket's own layers do.
func decodeInto(l interface {
	gopacket.DecodingLayer
	gopacket.Layer
}, data []byte, p gopacket.PacketBuilder, next gopacket.Decoder) error {
	if err := l.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(l)
	if next != nil {
		return p.NextDecoder(next)
	}
	if lt := l.NextLayerType(); lt != gopacket.LayerTypeZero {
		return p.NextDecoder(lt)
	}
	return nil
}
