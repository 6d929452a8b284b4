#!/usr/bin/env bash
# A private containerd for rkubelet's development and tests.
#
#   hack/containerd.sh start  [DIR]   start it (no-op when it already runs)
#   hack/containerd.sh stop   [DIR]   stop it and clean up what pods left behind
#   hack/containerd.sh status [DIR]   say whether it runs (exit 0 yes, 3 no)
#
# DIR defaults to ${RKUBELET_RUNTIME_DIR:-/tmp/rkubelet-runtime}. Everything
# this containerd owns lives under DIR: config.toml, root/, state/ (with the
# pod network namespaces), runc/ (runc state of CRI containers), cni/ (the
# bridge conflist), ipam/ (host-local leases), containerd.sock,
# containerd.log and containerd.pid. The system containerd
# (/run/containerd/containerd.sock) is never touched.
#
# `start` prints only shell `export` lines on stdout, so
#   eval "$(hack/containerd.sh start)"
# points CONTAINER_RUNTIME_ENDPOINT (and ctr's CONTAINERD_ADDRESS) at it.
#
# Pod networking is one bridge, ${RKUBELET_CNI_BRIDGE:-rkbr0}, on
# ${RKUBELET_POD_SUBNET:-10.88.0.0/16}; two instances running at the same
# time need different values for both (hack/test.sh uses its own). Pods'
# traffic leaving the subnet is masqueraded unless RKUBELET_CNI_IPMASQ=false
# (hack/nodes.sh: pods reach other nodes' pods by their own addresses). `stop`
# takes the bridge name from DIR's conflist. The pod sandbox image is
# ${RKUBELET_SANDBOX_IMAGE:-registry.k8s.io/pause:3.10} (hack/conformance.sh sets the
# e2e suite's pause:3.10.2). With RKUBELET_REGISTRY_MIRROR=HOST:PORT (the
# loopback registry of hack/registry.sh), images of that registry are pulled
# from it over plain HTTP; with RKUBELET_REGISTRY_MIRROR=NAME=HOST:PORT, the
# images of registry NAME are (hack/registry.sh mirror, for registry.k8s.io).
# With RKUBELET_IMAGE_FS_SIZE=SIZE (tmpfs's size=, e.g. 64m), root/ (images
# and snapshots) is a tmpfs of that size, a small image file system for image
# GC's tests; `stop` unmounts it. CDI specs are read from DIR/cdi, and from
# the directories in RKUBELET_CDI_SPEC_DIRS (space-separated; hack/nodes.sh
# adds /var/run/cdi, where upstream's DRA e2e specs write theirs).
#
# The runtime is RKUBELET_RUNTIME: containerd2 (the default: containerd v2.4
# and runc v1.5, built from the Go module proxy and cached by
# `hack/control-plane.sh runtime2`; a version 4 config) or containerd1
# (Debian's containerd 1.6 and runc 1.1 from PATH; a version 2 config).
# `start` writes the binaries' directory to DIR/runtime, which `stop` and
# `status` read, so they act on the runtime that was started.
set -euo pipefail

PROG=${0##*/}
SANDBOX_IMAGE=${RKUBELET_SANDBOX_IMAGE:-registry.k8s.io/pause:3.10}
IMAGE_FS_SIZE=${RKUBELET_IMAGE_FS_SIZE:-}
[[ -z "$IMAGE_FS_SIZE" || "$IMAGE_FS_SIZE" =~ ^[0-9]+[kmg]?$ ]] || {
  echo "${0##*/}: error: RKUBELET_IMAGE_FS_SIZE '$IMAGE_FS_SIZE' must be a size like 64m" >&2
  exit 1
}
REGISTRY_MIRROR=${RKUBELET_REGISTRY_MIRROR:-}
[[ -z "$REGISTRY_MIRROR" || "$REGISTRY_MIRROR" =~ ^([A-Za-z0-9.:-]+=)?[A-Za-z0-9.-]+:[0-9]+$ ]] || {
  echo "${0##*/}: error: RKUBELET_REGISTRY_MIRROR '$REGISTRY_MIRROR' must be HOST:PORT or NAME=HOST:PORT" >&2
  exit 1
}
MIRRORED=${REGISTRY_MIRROR%%=*}
REGISTRY_MIRROR=${REGISTRY_MIRROR#*=}
CNI_BIN_DIR=/usr/lib/cni
BRIDGE=${RKUBELET_CNI_BRIDGE:-rkbr0}
[[ "$BRIDGE" =~ ^[A-Za-z0-9_.-]{1,15}$ ]] || {
  echo "${0##*/}: error: bridge name '$BRIDGE' must be 1-15 of [A-Za-z0-9_.-]" >&2
  exit 1
}
POD_SUBNET=${RKUBELET_POD_SUBNET:-10.88.0.0/16}
[[ "$POD_SUBNET" =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}$ ]] || {
  echo "${0##*/}: error: pod subnet '$POD_SUBNET' must be an IPv4 CIDR like 10.88.0.0/16" >&2
  exit 1
}
IPMASQ=${RKUBELET_CNI_IPMASQ:-true}
[[ "$IPMASQ" == true || "$IPMASQ" == false ]] || {
  echo "${0##*/}: error: RKUBELET_CNI_IPMASQ '$IPMASQ' must be true or false" >&2
  exit 1
}
RUNTIME=${RKUBELET_RUNTIME:-containerd2}
[[ "$RUNTIME" == containerd1 || "$RUNTIME" == containerd2 ]] || {
  echo "${0##*/}: error: RKUBELET_RUNTIME '$RUNTIME' must be containerd1 or containerd2" >&2
  exit 1
}
NETWORK="rkubelet-${BRIDGE}"
START_TIMEOUT=30
STOP_TIMEOUT=10

TEMP_FILES=()
cleanup_temp_files() { ((${#TEMP_FILES[@]} == 0)) || rm -f "${TEMP_FILES[@]}"; }
trap cleanup_temp_files EXIT

die() { echo "$PROG: error: $*" >&2; exit 1; }
warn() { echo "$PROG: warning: $*" >&2; }
# shellcheck source=lib/mounts.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/mounts.sh"

usage() {
  echo "usage: $PROG start|stop|status [DIR]" >&2
  echo "  DIR defaults to \${RKUBELET_RUNTIME_DIR:-/tmp/rkubelet-runtime}" >&2
  exit 2
}

# ---------------------------------------------------------------------------
# paths

# resolve_dir DIR [create]: make DIR absolute (physical path when it exists,
# so it matches what /proc/mounts and /proc/PID/cmdline show).
resolve_dir() {
  local dir=$1 create=${2:-}
  [[ -n "$dir" ]] || die "empty runtime directory"
  [[ "$dir" == /* ]] || dir="$PWD/$dir"
  check_dir "$dir"
  if [[ -n "$create" ]]; then
    mkdir -p "$dir" || die "cannot create $dir"
  fi
  if [[ -d "$dir" ]]; then
    dir=$(cd "$dir" && pwd -P)
  fi
  dir=${dir%/}
  check_dir "$dir"
  printf '%s\n' "$dir"
}

check_dir() {
  # The path is written into TOML, JSON, and matched against /proc/mounts
  # (which escapes blanks): keep it to plain characters.
  [[ "$1" =~ ^/[A-Za-z0-9._+/-]+$ ]] ||
    die "runtime directory '$1' must be an absolute path of letters, digits and . _ + / - only"
  # unix socket paths are limited to 107 bytes; the ttrpc socket is the longest
  ((${#1} + 26 <= 107)) || die "runtime directory '$1' is too long for a unix socket path"
}

set_paths() {
  DIR=$1
  SOCK="$DIR/containerd.sock"
  CONFIG="$DIR/config.toml"
  PIDFILE="$DIR/containerd.pid"
  LOG="$DIR/containerd.log"
  # the binaries of the runtime started here, else PATH's
  BIN=""
  if [[ -r "$DIR/runtime" ]]; then
    read -r BIN <"$DIR/runtime" || true
  fi
  set_bins
}

# set_bins: containerd, ctr and runc of BIN (a directory; empty: PATH's).
set_bins() {
  CONTAINERD=${BIN:+$BIN/}containerd
  CTR=${BIN:+$BIN/}ctr
  RUNC=${BIN:+$BIN/}runc
}

# select_runtime: BIN for RKUBELET_RUNTIME (containerd2: built or taken from
# the cache), recorded in DIR/runtime. Without RKUBELET_RUNTIME, a DIR
# started before keeps its runtime (a containerd 2's state is not 1.6's).
select_runtime() {
  if [[ -z "${RKUBELET_RUNTIME:-}" && -r "$DIR/runtime" ]]; then
    [[ -n "$BIN" ]] && RUNTIME=containerd2 || RUNTIME=containerd1
    [[ -z "$BIN" || -x "$BIN/containerd" ]] && return 0
  fi
  BIN=""
  if [[ "$RUNTIME" == containerd2 ]]; then
    BIN=$("$(dirname "${BASH_SOURCE[0]}")/control-plane.sh" runtime2) ||
      die "building containerd 2 and runc failed"
  fi
  set_bins
  printf '%s\n' "$BIN" >"$DIR/runtime"
}

# ---------------------------------------------------------------------------
# processes

# cmdline PID: the command line of PID with NULs as blanks (empty if gone).
cmdline() {
  local c
  c=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) || return 0
  printf '%s\n' "$c"
}

# alive PID: the process exists and is not a zombie.
alive() {
  local stat
  [[ -r "/proc/$1/stat" ]] || return 1
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  stat=${stat##*) }
  [[ "${stat%% *}" != Z ]]
}

is_our_containerd() {
  local pid=$1 cmd
  alive "$pid" || return 1
  cmd=$(cmdline "$pid")
  [[ "$cmd" == *containerd* && " $cmd " == *" --config $CONFIG "* ]]
}

# find_pid: pid of the containerd serving DIR, or nothing.
find_pid() {
  local pid p comm
  if [[ -r "$PIDFILE" ]]; then
    pid=""
    read -r pid <"$PIDFILE" || true
    if [[ "$pid" =~ ^[0-9]+$ ]] && is_our_containerd "$pid"; then
      echo "$pid"
      return 0
    fi
  fi
  # the pid file may be stale or gone: look for it
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    read -r comm 2>/dev/null <"/proc/$p/comm" || continue
    [[ "$comm" == containerd ]] || continue
    if is_our_containerd "$p"; then
      echo "$p"
      return 0
    fi
  done
  return 0
}

answers() {
  [[ -S "$SOCK" ]] || return 1
  timeout 5 "$CTR" --connect-timeout 2s -a "$SOCK" version >/dev/null 2>&1
}

# wait_gone PID SECONDS: wait until PID is gone; fails on timeout.
wait_gone() {
  local pid=$1 deadline=$((SECONDS + $2))
  while alive "$pid"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# terminate PID...: TERM, then KILL those left after STOP_TIMEOUT seconds.
terminate() {
  local pid
  (($# > 0)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  for pid in "$@"; do
    if ! wait_gone "$pid" "$STOP_TIMEOUT"; then
      kill -KILL "$pid" 2>/dev/null || true
      wait_gone "$pid" 5 || warn "process $pid survives SIGKILL"
    fi
  done
}

# ---------------------------------------------------------------------------
# configuration

# edit_toml SETTINGS < IN > OUT: set `key = value` inside [section] for each
# "section<TAB>key<TAB>value" line of SETTINGS (section "" is the top
# level). Existing keys are replaced in place, missing keys are added at the
# end of their section, missing sections are appended.
edit_toml() {
  awk -v settings="$1" '
    BEGIN {
      n = 0
      while ((getline line < settings) > 0) {
        if (line == "") continue
        split(line, f, "\t")
        n++; sec[n] = f[1]; key[n] = f[2]; val[n] = f[3]; done[n] = 0
      }
      cur = ""
    }
    function flush(s,   i) {
      for (i = 1; i <= n; i++)
        if (sec[i] == s && !done[i]) { print key[i] " = " val[i]; done[i] = 1 }
    }
    /^[ \t]*\[/ {
      flush(cur)
      hdr = $0
      sub(/^[ \t]*\[/, "", hdr); sub(/\][ \t]*$/, "", hdr)
      cur = hdr; seen[hdr] = 1
      print; next
    }
    {
      eq = index($0, "=")
      if (eq > 0 && $0 !~ /^[ \t]*#/) {
        k = substr($0, 1, eq - 1); gsub(/^[ \t]+|[ \t]+$/, "", k)
        for (i = 1; i <= n; i++) {
          if (sec[i] == cur && key[i] == k) {
            ind = $0; sub(/[^ \t].*$/, "", ind)
            print ind key[i] " = " val[i]; done[i] = 1; next
          }
        }
      }
      print
    }
    END {
      flush(cur)
      for (i = 1; i <= n; i++) {
        if (done[i]) continue
        if (!(sec[i] in opened)) { print ""; print "[" sec[i] "]"; opened[sec[i]] = 1 }
        print key[i] " = " val[i]; done[i] = 1
        for (j = i + 1; j <= n; j++)
          if (!done[j] && sec[j] == sec[i]) { print key[j] " = " val[j]; done[j] = 1 }
      }
    }
  '
}

# write_config: DIR's config.toml for the runtime (a version 2 config for
# containerd 1.6, version 4 for containerd 2), made from the binary's own
# default with the settings edited in, then parsed by containerd itself and
# checked.
# The CDI spec directories as a TOML array's items: DIR/cdi, then
# RKUBELET_CDI_SPEC_DIRS'.
cdi_dirs() {
  local d out="'$DIR/cdi'"
  for d in ${RKUBELET_CDI_SPEC_DIRS:-}; do out+=", '$d'"; done
  echo "$out"
}

write_config() {
  if [[ -n "$BIN" ]]; then
    settings_v4
  else
    settings_v2
  fi
  local tmp="$CONFIG.tmp"
  TEMP_FILES+=("$tmp" "$tmp.default")
  "$CONTAINERD" config default >"$tmp.default" 2>/dev/null ||
    { rm -f "$tmp.default"; die "'containerd config default' failed"; }
  edit_toml "$CONFIG.settings" <"$tmp.default" >"$tmp"
  rm -f "$tmp.default"

  # let containerd itself parse the result and check the settings took
  local dump
  dump=$("$CONTAINERD" --config "$tmp" config dump 2>&1) ||
    die "containerd rejects the generated config: $dump"
  local want
  for want in "address = [\"']$SOCK[\"']" "restrict_oom_score_adj = true" \
    "(sandbox_image|sandbox) = [\"']$SANDBOX_IMAGE[\"']" "conf_dir = [\"']$DIR/cni[\"']" \
    "root = [\"']$DIR/root[\"']" "SystemdCgroup = false"; do
    grep -qE -- "$want" <<<"$dump" || die "generated config lacks '$want'"
  done
  mv -f "$tmp" "$CONFIG"
  rm -f "$CONFIG.settings"
}

# settings_v4: containerd 2's settings (its CRI split into the runtime,
# images and server plugins; registry hosts in DIR/certs.d; NRI off, as
# containerd 1.6 had it).
settings_v4() {
  local rt="plugins.'io.containerd.cri.v1.runtime'" images="plugins.'io.containerd.cri.v1.images'"
  local runc="$rt.containerd.runtimes.runc" handler="$rt.containerd.runtimes.test-handler"
  TEMP_FILES+=("$CONFIG.settings")
  {
    printf '%s\t%s\t%s\n' \
      "" root "'$DIR/root'" \
      "" state "'$DIR/state'" \
      "" imports "[]" \
      "plugins.'io.containerd.server.v1.grpc'" address "'$SOCK'" \
      "plugins.'io.containerd.server.v1.grpc-tcp'" address "''" \
      "plugins.'io.containerd.server.v1.ttrpc'" address "'$SOCK.ttrpc'" \
      "plugins.'io.containerd.server.v1.debug'" address "''" \
      "plugins.'io.containerd.server.v1.metrics'" address "''" \
      "plugins.'io.containerd.internal.v1.opt'" path "'$DIR/opt'" \
      "plugins.'io.containerd.nri.v1.nri'" disable true \
      "$rt" restrict_oom_score_adj true \
      "$rt" netns_mounts_under_state_dir true \
      "$rt" enable_selinux false \
      "$rt" cdi_spec_dirs "[$(cdi_dirs)]" \
      "$rt.cni" bin_dirs "['$CNI_BIN_DIR']" \
      "$rt.cni" conf_dir "'$DIR/cni'" \
      "$rt.cni" max_conf_num 1 \
      "$rt.containerd" default_runtime_name "'runc'" \
      "$runc" runtime_type "'io.containerd.runc.v2'" \
      "$runc.options" BinaryName "'$RUNC'" \
      "$runc.options" SystemdCgroup false \
      "$runc.options" Root "'$DIR/runc'" \
      "$handler" runtime_type "'io.containerd.runc.v2'" \
      "$handler.options" BinaryName "'$RUNC'" \
      "$handler.options" SystemdCgroup false \
      "$handler.options" Root "'$DIR/runc'" \
      "$images" snapshotter "'overlayfs'" \
      "$images.pinned_images" sandbox "'$SANDBOX_IMAGE'" \
      "$images.registry" config_path "'$DIR/certs.d'" \
      "plugins.'io.containerd.transfer.v1.local'" config_path "'$DIR/certs.d'" \
      "plugins.'io.containerd.grpc.v1.cri'" disable_tcp_service true \
      "plugins.'io.containerd.grpc.v1.cri'" stream_server_address "'127.0.0.1'" \
      "plugins.'io.containerd.grpc.v1.cri'" stream_server_port "'0'"
  } >"$CONFIG.settings"
  # a mirror is a hosts.toml of the mirrored registry
  rm -rf "$DIR/certs.d"
  mkdir -p "$DIR/certs.d" "$DIR/cdi"
  if [[ -n "$REGISTRY_MIRROR" ]]; then
    mkdir -p "$DIR/certs.d/$MIRRORED"
    printf 'server = "http://%s"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' \
      "$REGISTRY_MIRROR" "$REGISTRY_MIRROR" >"$DIR/certs.d/$MIRRORED/hosts.toml"
  fi
}

# settings_v2: containerd 1.6's settings.
settings_v2() {
  local cri='plugins."io.containerd.grpc.v1.cri"'
  local runc="$cri.containerd.runtimes.runc"
  # a second runtime handler, runc under the name upstream's e2e suite
  # gives its preconfigured RuntimeClass handler: RuntimeClasses resolve to it
  local handler="$cri.containerd.runtimes.test-handler"
  local settings="$CONFIG.settings"
  TEMP_FILES+=("$settings")
  {
    printf '%s\t%s\t%s\n' \
      "" root "\"$DIR/root\"" \
      "" state "\"$DIR/state\"" \
      grpc address "\"$SOCK\"" \
      grpc tcp_address '""' \
      ttrpc address "\"$SOCK.ttrpc\"" \
      debug address '""' \
      metrics address '""' \
      'plugins."io.containerd.internal.v1.opt"' path "\"$DIR/opt\"" \
      "$cri" restrict_oom_score_adj true \
      "$cri" sandbox_image "\"$SANDBOX_IMAGE\"" \
      "$cri" disable_tcp_service true \
      "$cri" stream_server_address '"127.0.0.1"' \
      "$cri" stream_server_port '"0"' \
      "$cri" netns_mounts_under_state_dir true \
      "$cri" systemd_cgroup false \
      "$cri" enable_selinux false \
      "$cri.cni" bin_dir "\"$CNI_BIN_DIR\"" \
      "$cri.cni" conf_dir "\"$DIR/cni\"" \
      "$cri.cni" max_conf_num 1 \
      "$cri.containerd" snapshotter '"overlayfs"' \
      "$cri.containerd" default_runtime_name '"runc"' \
      "$runc" runtime_type '"io.containerd.runc.v2"' \
      "$runc.options" SystemdCgroup false \
      "$runc.options" Root "\"$DIR/runc\"" \
      "$handler" runtime_type '"io.containerd.runc.v2"' \
      "$handler.options" SystemdCgroup false \
      "$handler.options" Root "\"$DIR/runc\""
    if [[ -n "$REGISTRY_MIRROR" ]]; then
      printf '%s\t%s\t%s\n' "$cri.registry.mirrors.\"$MIRRORED\"" endpoint \
        "[\"http://$REGISTRY_MIRROR\"]"
    fi
  } >"$settings"
}

write_cni() {
  mkdir -p "$DIR/cni" "$DIR/ipam"
  # only one network: remove any other file containerd could pick first
  find "$DIR/cni" -mindepth 1 -maxdepth 1 ! -name 10-rkubelet.conflist -exec rm -rf {} +
  cat >"$DIR/cni/10-rkubelet.conflist.tmp" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": $IPMASQ,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$POD_SUBNET" }]],
        "routes": [{ "dst": "0.0.0.0/0" }],
        "dataDir": "$DIR/ipam"
      }
    },
    {
      "type": "portmap",
      "capabilities": { "portMappings": true }
    }
  ]
}
EOF
  mv -f "$DIR/cni/10-rkubelet.conflist.tmp" "$DIR/cni/10-rkubelet.conflist"
}

# ---------------------------------------------------------------------------
# commands

print_hints() {
  echo "export CONTAINER_RUNTIME_ENDPOINT=unix://$SOCK"
  echo "export CONTAINERD_ADDRESS=$SOCK"
}

cmd_start() {
  local tool pid
  pid=$(find_pid)
  # a running containerd keeps its runtime; a new one takes the asked one
  [[ -n "$pid" ]] || select_runtime
  for tool in "$CONTAINERD" "$CTR" "$RUNC" timeout setsid; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found (run hack/install-deps.sh)"
  done
  [[ -x "$CNI_BIN_DIR/bridge" && -x "$CNI_BIN_DIR/host-local" && -x "$CNI_BIN_DIR/portmap" ]] ||
    die "CNI plugins missing in $CNI_BIN_DIR (run hack/install-deps.sh)"
  [[ $(id -u) -eq 0 ]] || die "containerd needs root"

  if [[ -n "$pid" ]]; then
    wait_answering "$pid"
    echo "$pid" >"$PIDFILE"
    print_hints
    return 0
  fi

  mkdir -p "$DIR/root" "$DIR/state" "$DIR/runc" "$DIR/opt"
  if [[ -n "$IMAGE_FS_SIZE" ]] && ! mountpoint -q "$DIR/root"; then
    mount -t tmpfs -o "size=$IMAGE_FS_SIZE,mode=0711" rkubelet-imagefs "$DIR/root"
  fi
  write_config
  write_cni
  rm -f "$SOCK" "$SOCK.ttrpc"
  [[ ! -f "$LOG" ]] || mv -f "$LOG" "$LOG.1"

  # own session: the daemon outlives this script and the caller's terminal
  # (PATH: containerd 2 finds its shim beside it)
  PATH=${BIN:+$BIN:}$PATH setsid "$CONTAINERD" --config "$CONFIG" </dev/null >"$LOG" 2>&1 &
  pid=$!
  echo "$pid" >"$PIDFILE"
  wait_answering "$pid"
  # setsid normally execs in place; make sure the pid file names containerd
  is_our_containerd "$pid" || pid=$(find_pid)
  [[ -n "$pid" ]] || die "containerd answers on $SOCK but its process was not found"
  echo "$pid" >"$PIDFILE"
  print_hints
}

# wait_answering PID: wait (bounded) until containerd answers on SOCK.
wait_answering() {
  local pid=$1 deadline=$((SECONDS + START_TIMEOUT))
  until answers; do
    if ! alive "$pid"; then
      echo "$PROG: containerd exited; last lines of $LOG:" >&2
      tail -n 20 "$LOG" >&2 2>/dev/null || true
      die "containerd failed to start"
    fi
    if ((SECONDS >= deadline)); then
      echo "$PROG: last lines of $LOG:" >&2
      tail -n 20 "$LOG" >&2 2>/dev/null || true
      die "containerd (pid $pid) does not answer on $SOCK after ${START_TIMEOUT}s"
    fi
    sleep 0.2
  done
}

# Kill what runc still runs for the CRI containers (their runc state is under
# DIR/runc/<namespace>): `runc delete --force` kills and removes each one.
cleanup_runc() {
  local root id
  command -v "$RUNC" >/dev/null 2>&1 || return 0
  for root in "$DIR"/runc/*/; do
    [[ -d "$root" ]] || continue
    root=${root%/}
    while read -r id; do
      [[ -n "$id" ]] || continue
      "$RUNC" --root "$root" delete --force "$id" >/dev/null 2>&1 ||
        warn "runc delete --force $id failed"
    done < <("$RUNC" --root "$root" list -q 2>/dev/null || true)
  done
}

# pids of processes whose parent is one of the given pids
children_of() {
  local p stat ppid want=" $* "
  for p in /proc/[0-9]*; do
    read -r stat 2>/dev/null <"$p/stat" || continue
    stat=${stat##*) }
    ppid=${stat#* }
    ppid=${ppid%% *}
    [[ "$want" == *" $ppid "* ]] && echo "${p#/proc/}"
  done
  return 0
}

# paths of the unix sockets a process holds (from /proc/net/unix)
socket_paths() {
  local fd link inodes=""
  for fd in /proc/"$1"/fd/*; do
    link=$(readlink "$fd" 2>/dev/null) || continue
    [[ "$link" == socket:\[*\] ]] || continue
    link=${link#socket:\[}
    inodes+=" ${link%\]}"
  done
  [[ -n "$inodes" ]] || return 0
  awk -v inodes="$inodes" '
    BEGIN { n = split(inodes, a, " "); for (i = 1; i <= n; i++) want[a[i]] = 1 }
    NR > 1 && NF >= 8 && ($7 in want) { print $8 }
  ' /proc/net/unix 2>/dev/null || true
}

# Containers started without the CRI runtime options (e.g. by `ctr run`)
# keep their runc state in runc's default root /run/containerd/runc/<ns>.
# The shim's command line names the container: delete it there (this also
# removes its cgroups), but only a container that one of our shims serves.
delete_shim_container() {
  local args=() i ns="" id="" root
  command -v "$RUNC" >/dev/null 2>&1 || return 0
  mapfile -d '' -t args <"/proc/$1/cmdline" 2>/dev/null || return 0
  for ((i = 0; i + 1 < ${#args[@]}; i++)); do
    case "${args[i]}" in
    -namespace) ns=${args[i + 1]} ;;
    -id) id=${args[i + 1]} ;;
    esac
  done
  [[ "$ns" =~ ^[A-Za-z0-9._-]+$ && "$id" =~ ^[A-Za-z0-9._-]+$ ]] || return 0
  [[ "$ns" != .* && "$id" != .* ]] || return 0
  root="/run/containerd/runc/$ns"
  [[ -e "$root/$id/state.json" ]] || return 0
  "$RUNC" --root "$root" delete --force "$id" >/dev/null 2>&1 || warn "runc delete --force $id failed"
}

# Shims serving this containerd mention its socket on their command line.
# Kill their children (container init processes; with them their pid
# namespaces) first, then the shims, then remove the shims' sockets.
cleanup_shims() {
  local p comm shims=() kids=() sockets=() path
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    read -r comm 2>/dev/null <"/proc/$p/comm" || continue
    [[ "$comm" == containerd-shim* ]] || continue
    [[ "$(cmdline "$p")" == *"$SOCK"* ]] && shims+=("$p")
  done
  ((${#shims[@]} > 0)) || return 0
  for p in "${shims[@]}"; do
    delete_shim_container "$p"
    while read -r path; do
      [[ "$path" == /run/containerd/s/* ]] && sockets+=("$path")
    done < <(socket_paths "$p")
  done
  mapfile -t kids < <(children_of "${shims[@]}")
  if ((${#kids[@]} > 0)); then
    kill -KILL "${kids[@]}" 2>/dev/null || true
    for p in "${kids[@]}"; do wait_gone "$p" 5 || warn "container process $p survives SIGKILL"; done
  fi
  terminate "${shims[@]}"
  ((${#sockets[@]} == 0)) || rm -f "${sockets[@]}"
}

# Unmount everything mounted at or below DIR, deepest first.
cleanup_mounts() {
  unmount_under "$DIR" || warn "could not unmount everything under $DIR"
}

# Rules the bridge (ipMasq) and portmap plugins left in the nat table for
# our network (pods whose CNI DEL never ran), and the chains they jump to.
cleanup_iptables() {
  local chain num target chains=() dead=()
  command -v iptables >/dev/null 2>&1 || return 0
  iptables -w -t nat -S >/dev/null 2>&1 || return 0
  mapfile -t chains < <(iptables -w -t nat -S 2>/dev/null | awk '$1 == "-P" || $1 == "-N" { print $2 }')
  for chain in "${chains[@]}"; do
    while read -r num target; do
      iptables -w -t nat -D "$chain" "$num" 2>/dev/null || continue
      if [[ "$target" == CNI-* && "$target" != CNI-HOSTPORT-* ]]; then
        dead+=("$target")
      fi
    done < <(
      iptables -w -t nat -L "$chain" -n --line-numbers 2>/dev/null |
        awk -v pat="name: \"$NETWORK\" id: " 'index($0, pat) { print $1, $2 }' | sort -rn
    )
  done
  for chain in "${dead[@]}"; do
    iptables -w -t nat -F "$chain" 2>/dev/null || true
    iptables -w -t nat -X "$chain" 2>/dev/null || true
  done
}

cleanup_network() {
  if command -v ip >/dev/null 2>&1 && ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link delete "$BRIDGE" 2>/dev/null || warn "could not delete bridge $BRIDGE"
  fi
  cleanup_iptables
  # libcni's result cache (containerd keeps it in the system-wide default):
  # our network's entries, and the loopback network's for our sandboxes
  local cache=/var/lib/cni/results sandbox
  [[ -d "$cache" ]] || return 0
  rm -f "$cache/$NETWORK"-*
  for sandbox in "$DIR"/root/io.containerd.grpc.v1.cri/sandboxes/*/; do
    [[ -d "$sandbox" ]] || continue
    sandbox=${sandbox%/}
    rm -f "$cache/cni-loopback-${sandbox##*/}-lo"
  done
}

# The bridge this DIR's containerd was started with (it may differ from
# the current environment): read it back from the conflist.
bridge_from_conflist() {
  local conflist="$DIR/cni/10-rkubelet.conflist" name
  [[ -f "$conflist" ]] || return 0
  name=$(sed -n 's/^[[:space:]]*"bridge":[[:space:]]*"\([A-Za-z0-9_.-]*\)".*/\1/p' "$conflist" | head -n 1)
  if [[ -n "$name" ]]; then
    BRIDGE=$name
    NETWORK="rkubelet-${BRIDGE}"
  fi
}

cmd_stop() {
  local pid
  bridge_from_conflist
  pid=$(find_pid)
  if [[ -n "$pid" ]]; then
    terminate "$pid"
  fi
  cleanup_runc
  cleanup_shims
  cleanup_mounts
  cleanup_network
  # no pod network survives the above: drop host-local's leases
  if [[ -d "$DIR/ipam" ]]; then
    find "$DIR/ipam" -mindepth 1 -delete
  fi
  rm -f "$PIDFILE" "$SOCK" "$SOCK.ttrpc"
}

cmd_status() {
  local pid
  pid=$(find_pid)
  if [[ -z "$pid" ]]; then
    echo "containerd for $DIR: not running"
    return 3
  fi
  if answers; then
    echo "containerd for $DIR: running (pid $pid), socket $SOCK"
  else
    echo "containerd for $DIR: process $pid exists but does not answer on $SOCK"
    return 1
  fi
}

main() {
  (($# >= 1 && $# <= 2)) || usage
  local cmd=$1 dir=${2:-${RKUBELET_RUNTIME_DIR:-/tmp/rkubelet-runtime}}
  case "$cmd" in
  start)
    dir=$(resolve_dir "$dir" create)
    set_paths "$dir"
    cmd_start
    ;;
  stop)
    dir=$(resolve_dir "$dir")
    set_paths "$dir"
    cmd_stop
    ;;
  status)
    dir=$(resolve_dir "$dir")
    set_paths "$dir"
    cmd_status
    ;;
  *) usage ;;
  esac
}

main "$@"
