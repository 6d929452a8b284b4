// Package csiplugin holds what the CSI programs under hack/k8s/cmd share:
// unix sockets, a kubelet plugin registrar (the registration API v1 of
// k8s.io/kubelet, as node-driver-registrar serves it), the gRPC call log
// the e2e suite reads from a mock driver, and the wait for a stop signal.
package csiplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Listen makes a fresh unix socket at path (its directory too). A
// "unix://" prefix is accepted, as CSI endpoints are often written.
func Listen(path string) net.Listener {
	path = SocketPath(path)
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		log.Fatal(err)
	}
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		log.Fatal(err)
	}
	return l
}

// SocketPath is endpoint without its "unix://" scheme.
func SocketPath(endpoint string) string {
	return strings.TrimPrefix(endpoint, "unix://")
}

// Registrar answers the kubelet's plugin watcher for one CSI driver. Done,
// when set, is called with the kubelet's verdict.
type Registrar struct {
	registerapi.UnimplementedRegistrationServer
	Name, Endpoint string
	Done           func(registered bool, reason string)
}

func (r *Registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.Name,
		Endpoint:          r.Endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (r *Registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if s.PluginRegistered {
		log.Printf("registered with the kubelet as %s", r.Name)
	} else {
		log.Printf("registration refused by the kubelet: %s", s.Error)
	}
	if r.Done != nil {
		r.Done(s.PluginRegistered, s.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// ServeRegistrar serves r on <dir>/<name>-reg.sock, the socket name
// node-driver-registrar uses; it returns the socket's path and a stop
// that removes it.
func ServeRegistrar(dir string, r *Registrar) (string, func()) {
	server := grpc.NewServer()
	registerapi.RegisterRegistrationServer(server, r)
	socket := filepath.Join(dir, fmt.Sprintf("%s-reg.sock", r.Name))
	go func() { log.Fatal(server.Serve(Listen(socket))) }()
	return socket, func() {
		server.Stop()
		_ = os.Remove(socket)
	}
}

// call is one line of the mock driver's log, in the JSON the e2e suite
// parses after "gRPCCall:" (drivers.MockCSICall): the method, the request
// and response as their Go structs encode (snake-case fields), the error's
// text and its gRPC status.
type call struct {
	Method    string
	Request   any
	Response  any
	Error     string
	FullError any
}

// LogCalls is a unary interceptor that logs each call as the e2e suite's
// mock drivers do, so specs can read the calls from the container's log.
func LogCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	c := call{Method: info.FullMethod, Request: req, Response: resp}
	if err != nil {
		c.Error = err.Error()
		c.FullError = status.Convert(err).Proto()
	}
	line, merr := json.Marshal(c)
	if merr != nil {
		log.Printf("%s: %v (log line not encoded: %v)", info.FullMethod, err, merr)
	} else {
		log.Printf("gRPCCall: %s", line)
	}
	return resp, err
}

// WaitForSignal returns at SIGINT or SIGTERM.
func WaitForSignal() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
