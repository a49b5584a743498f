package main

// The floor of the GRPC dial: a ProxyService in this process that answers every DIAL_REQ at once
// and echoes DATA itself, with no agent, no target and no second process. Dialed exactly as the
// proxies are (a new gRPC connection and Proxy stream per dial over a unix socket), it measures
// what the client and the gRPC set-up cost on their own; what a proxy adds is its figure minus this.

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	proxy "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
)

type echoProxy struct{}

func (echoProxy) Proxy(s proxy.ProxyService_ProxyServer) error {
	const connectID = 1
	for {
		p, err := s.Recv()
		if err != nil {
			return nil
		}
		var out *proxy.Packet
		switch p.Type {
		case proxy.PacketType_DIAL_REQ:
			out = &proxy.Packet{Type: proxy.PacketType_DIAL_RSP, Payload: &proxy.Packet_DialResponse{DialResponse: &proxy.DialResponse{Random: p.GetDialRequest().Random, ConnectID: connectID}}}
		case proxy.PacketType_DATA:
			out = &proxy.Packet{Type: proxy.PacketType_DATA, Payload: &proxy.Packet_Data{Data: &proxy.Data{ConnectID: connectID, Data: p.GetData().Data}}}
		case proxy.PacketType_CLOSE_REQ:
			out = &proxy.Packet{Type: proxy.PacketType_CLOSE_RSP, Payload: &proxy.Packet_CloseResponse{CloseResponse: &proxy.CloseResponse{ConnectID: connectID}}}
		default:
			return nil
		}
		if err := s.Send(out); err != nil {
			return nil
		}
	}
}

// startFloorProxy serves echoProxy on a fresh unix socket; stop removes it.
func startFloorProxy() (uds string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "go-driver-floor-")
	if err != nil {
		return "", nil, err
	}
	uds = filepath.Join(dir, "proxy.sock")
	l, err := net.Listen("unix", uds)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("floor proxy: %w", err)
	}
	srv := grpc.NewServer()
	proxy.RegisterProxyServiceServer(srv, echoProxy{})
	go srv.Serve(l)
	return uds, func() { srv.Stop(); os.RemoveAll(dir) }, nil
}
