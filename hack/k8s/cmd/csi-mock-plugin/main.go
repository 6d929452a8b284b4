// Command csi-mock-plugin is the CSI driver of rkubelet's storage tests:
// the mock driver upstream's e2e suite embeds
// (k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/mock/service, with
// its OS-backed directory I/O) served on a unix socket (Identity,
// Controller and Node, so external-provisioner and external-attacher use
// the same socket), and a registrar that serves the kubelet plugin
// registration API v1 in the kubelet's plugins_registry directory, as
// node-driver-registrar does (that sidecar is not on the Go module proxy).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/mock/service"
)

type registrar struct {
	registerapi.UnimplementedRegistrationServer
	name, endpoint string
}

func (r *registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.name,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (r *registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if s.PluginRegistered {
		log.Printf("registered with the kubelet as %s", r.name)
	} else {
		log.Printf("registration refused by the kubelet: %s", s.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// listen makes a fresh unix socket at path (its directory too).
func listen(path string) net.Listener {
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

func main() {
	name := flag.String("driver-name", service.Name, "the CSI driver's name")
	csiAddress := flag.String("csi-address", "", "the unix socket of the CSI service")
	registrationDir := flag.String("registration-dir", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin registration directory; empty: do not register")
	disableAttach := flag.Bool("disable-attach", false, "no ControllerPublishVolume (a CSIDriver with attachRequired false)")
	attachLimit := flag.Int64("attach-limit", 0, "NodeGetInfo's max_volumes_per_node")
	nodeExpansion := flag.Bool("node-expansion-required", false, "NodeExpandVolume is needed after ControllerExpandVolume")
	volumeMountGroup := flag.Bool("volume-mount-group", false, "advertise the VOLUME_MOUNT_GROUP node capability")
	topology := flag.Bool("enable-topology", false, "report a topology segment")
	flag.Parse()
	if *csiAddress == "" {
		log.Fatal("--csi-address is required")
	}
	driver := service.New(service.Config{
		DriverName:               *name,
		DisableAttach:            *disableAttach,
		AttachLimit:              *attachLimit,
		NodeExpansionRequired:    *nodeExpansion,
		VolumeMountGroupRequired: *volumeMountGroup,
		EnableTopology:           *topology,
		PermissiveTargetPath:     true,
		IO:                       service.OSDirIO{},
	})
	server := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		log.Printf("%s: %v", info.FullMethod, err)
		return resp, err
	}))
	csi.RegisterIdentityServer(server, driver)
	csi.RegisterControllerServer(server, driver)
	csi.RegisterNodeServer(server, driver)
	go func() { log.Fatal(server.Serve(listen(*csiAddress))) }()

	var reg *grpc.Server
	if *registrationDir != "" {
		reg = grpc.NewServer()
		registerapi.RegisterRegistrationServer(reg, &registrar{name: *name, endpoint: *csiAddress})
		socket := filepath.Join(*registrationDir, fmt.Sprintf("%s-reg.sock", *name))
		go func() { log.Fatal(reg.Serve(listen(socket))) }()
		defer os.Remove(socket)
	}
	log.Printf("serving %s on %s", *name, *csiAddress)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
	if reg != nil {
		reg.Stop()
	}
	server.Stop()
}
