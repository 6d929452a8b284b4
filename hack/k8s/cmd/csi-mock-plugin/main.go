// Command csi-mock-plugin is the CSI driver of rkubelet's storage tests:
// the mock driver upstream's e2e suite embeds
// (k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/mock/service, with
// its OS-backed directory I/O) served on a unix socket (Identity,
// Controller and Node, so the external sidecars use the same socket).
//
// Its flags are those of csi-driver-host-path's hostpathplugin, whose
// image upstream's CSI mock specs deploy (that driver is not on the Go
// module proxy; hack/e2e-images.sh builds this program under its name):
// every call is logged as "gRPCCall: {json}", which those specs read, and
// with --proxy-endpoint it only forwards each connection to its socket
// to one accepted on that TCP address, where the e2e suite serves its
// embedded mock driver. --registration-dir, rkubelet's own, also serves
// the kubelet plugin registration API there, as node-driver-registrar
// does (the cluster tests and the benchmark run it without that sidecar).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/mock/service"

	"rkubelet.local/k8s/internal/csiplugin"
)

func main() {
	name := flag.String("drivername", service.Name, "the CSI driver's name")
	endpoint := flag.String("endpoint", "", "the unix socket of the CSI service (unix:// optional)")
	proxyEndpoint := flag.String("proxy-endpoint", "", "tcp://[HOST]:PORT: serve nothing, forward each connection to --endpoint to one accepted here")
	enableAttach := flag.Bool("enable-attach", false, "ControllerPublishVolume is offered (a CSIDriver with attachRequired true)")
	attachLimit := flag.Int64("attach-limit", 0, "NodeGetInfo's max_volumes_per_node")
	nodeExpansion := flag.Bool("node-expand-required", false, "NodeExpandVolume is needed after ControllerExpandVolume")
	topology := flag.Bool("enable-topology", false, "report a topology segment")
	volumeMountGroup := flag.Bool("volume-mount-group", false, "advertise the VOLUME_MOUNT_GROUP node capability")
	registrationDir := flag.String("registration-dir", "", "the kubelet's plugin registration directory to register in (default: do not register)")
	// Accepted as hostpathplugin accepts them: the mock keeps its volumes in
	// memory under its own node ID and logs every call whatever the level.
	flag.String("nodeid", "", "accepted; the mock driver reports its own node ID")
	stateDir := flag.String("statedir", filepath.Join(os.TempDir(), "csi-mock-plugin"), "where raw block volumes keep their data (the mock keeps the rest in memory)")
	flag.Int("v", 0, "accepted; every call is logged")
	flag.Parse()
	if *endpoint == "" {
		log.Fatal("--endpoint is required")
	}
	if *proxyEndpoint != "" {
		proxy(*endpoint, *proxyEndpoint)
		return
	}
	driver := service.New(service.Config{
		DriverName:               *name,
		DisableAttach:            !*enableAttach,
		AttachLimit:              *attachLimit,
		NodeExpansionRequired:    *nodeExpansion,
		VolumeMountGroupRequired: *volumeMountGroup,
		EnableTopology:           *topology,
		PermissiveTargetPath:     true,
		IO:                       service.OSDirIO{},
	})
	server := grpc.NewServer(grpc.UnaryInterceptor(csiplugin.LogCalls))
	csi.RegisterIdentityServer(server, driver)
	csi.RegisterControllerServer(server, driver)
	csi.RegisterNodeServer(server, &node{NodeServer: driver, ephemeral: map[string]bool{}, stateDir: *stateDir})
	go func() { log.Fatal(server.Serve(csiplugin.Listen(*endpoint))) }()

	stopRegistrar := func() {}
	if *registrationDir != "" {
		_, stopRegistrar = csiplugin.ServeRegistrar(*registrationDir, &csiplugin.Registrar{Name: *name, Endpoint: csiplugin.SocketPath(*endpoint)})
	}
	log.Printf("serving %s on %s", *name, *endpoint)
	csiplugin.WaitForSignal()
	stopRegistrar()
	server.Stop()
}

// node serves the NodePublishVolume and NodeUnpublishVolume of CSI inline
// (ephemeral) volumes itself, as hostpathplugin does: the mock service
// reads the volume it looked up even when an inline volume has none (a nil
// pointer, which ends the process). It gives raw block volumes a device,
// as hostpathplugin does: the mock publishes a directory. Every other call
// is the mock's.
type node struct {
	csi.NodeServer
	mu        sync.Mutex
	ephemeral map[string]bool
	stateDir  string
}

// blockSize is the size of a raw block volume's backing file.
const blockSize = 8 << 20

func (n *node) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if req.GetVolumeCapability().GetBlock() != nil {
		return n.publishBlock(ctx, req)
	}
	if req.GetVolumeContext()["csi.storage.k8s.io/ephemeral"] != "true" {
		return n.NodeServer.NodePublishVolume(ctx, req)
	}
	if req.GetVolumeId() == "" || req.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "Volume ID and Target Path cannot be empty")
	}
	if err := os.Mkdir(req.GetTargetPath(), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, status.Errorf(codes.Internal, "NodePublishVolume: could not create target dir %q: %v", req.GetTargetPath(), err)
	}
	n.mu.Lock()
	n.ephemeral[req.GetVolumeId()] = true
	n.mu.Unlock()
	return &csi.NodePublishVolumeResponse{}, nil
}

// publishBlock publishes a raw block volume: the mock's bookkeeping first,
// then, in place of its directory, a loop device over the volume's backing
// file (made once, under --statedir) bind-mounted on the target file. Each
// target has its own loop device, detached when it is unpublished.
func (n *node) publishBlock(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if isDevice(target) {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if _, err := n.NodeServer.NodePublishVolume(ctx, req); err != nil {
		return nil, err
	}
	fail := func(what string, err error) (*csi.NodePublishVolumeResponse, error) {
		return nil, status.Errorf(codes.Internal, "NodePublishVolume: %s for block volume %q at %q: %v", what, req.GetVolumeId(), target, err)
	}
	if err := os.MkdirAll(n.stateDir, 0o700); err != nil {
		return fail("making the state directory", err)
	}
	backing := filepath.Join(n.stateDir, url.PathEscape(req.GetVolumeId())+".img")
	file, err := os.OpenFile(backing, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fail("making the backing file", err)
	}
	err = file.Truncate(blockSize)
	_ = file.Close()
	if err != nil {
		return fail("sizing the backing file", err)
	}
	out, err := exec.Command("losetup", "-f", "--show", backing).CombinedOutput()
	if err != nil {
		return fail("losetup", fmt.Errorf("%v: %s", err, out))
	}
	device := strings.TrimSpace(string(out))
	// The mock made the target a directory: a device is bound on a file.
	if err := os.RemoveAll(target); err != nil {
		return fail("removing the mock's directory", err)
	}
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		return fail("making the target file", err)
	}
	if err := unix.Mount(device, target, "", unix.MS_BIND, ""); err != nil {
		_ = exec.Command("losetup", "-d", device).Run()
		return fail("bind-mounting "+device, err)
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// isDevice tells whether path is a block device (a published raw block
// volume's target).
func isDevice(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode()&os.ModeDevice != 0
}

func (n *node) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if target := req.GetTargetPath(); isDevice(target) {
		var st unix.Stat_t
		if err := unix.Stat(target, &st); err == nil && unix.Major(st.Rdev) == 7 {
			if err := unix.Unmount(target, 0); err != nil {
				return nil, status.Errorf(codes.Internal, "NodeUnpublishVolume: unmounting %q: %v", target, err)
			}
			_ = exec.Command("losetup", "-d", fmt.Sprintf("/dev/loop%d", unix.Minor(st.Rdev))).Run()
		}
	}
	n.mu.Lock()
	ephemeral := n.ephemeral[req.GetVolumeId()]
	delete(n.ephemeral, req.GetVolumeId())
	n.mu.Unlock()
	if !ephemeral {
		return n.NodeServer.NodeUnpublishVolume(ctx, req)
	}
	if err := os.RemoveAll(req.GetTargetPath()); err != nil {
		return nil, status.Errorf(codes.Internal, "Unable to delete previously created target directory: %v", err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// proxy pairs each connection to the unix socket endpoint with the next
// one accepted on the TCP address, and copies bytes both ways until either
// side closes, as hostpathplugin's proxy mode (and socat with fork) does.
func proxy(endpoint, tcp string) {
	remote, err := net.Listen("tcp", strings.TrimPrefix(tcp, "tcp://"))
	if err != nil {
		log.Fatal(err)
	}
	accepted := make(chan net.Conn)
	go func() {
		for {
			c, err := remote.Accept()
			if err != nil {
				log.Fatal(err)
			}
			accepted <- c
		}
	}()
	local := csiplugin.Listen(endpoint)
	log.Printf("forwarding %s to connections on %s", endpoint, tcp)
	for {
		l, err := local.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go pipe(l, <-accepted)
	}
}

func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	copyTo := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go copyTo(a, b)
	go copyTo(b, a)
	<-done
	_ = a.Close()
	_ = b.Close()
}
