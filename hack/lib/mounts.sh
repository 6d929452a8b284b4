# Mounts left under a directory, removed before the directory is. Sourced
# by the scripts that tear down what a kubelet and containerd leave: pod
# volumes (tmpfs), sandbox network namespaces, and the kubelet's root
# directory, which both rkubelet and the upstream kubelet bind-mount onto
# itself with shared propagation (upstream's MakeRShared) and never unmount.
#
#   unmount_under DIR    unmount everything at or below DIR, deepest first
#                        (lazily where busy); fails when something remains

unmount_under() {
  local dir=${1%/} pass m
  for pass in 1 2 3 4; do
    local mounts=()
    mapfile -t mounts < <(
      awk -v d="$dir" '$2 == d || index($2, d "/") == 1 { print length($2) " " $2 }' /proc/mounts |
        sort -rn | cut -d' ' -f2-
    )
    ((${#mounts[@]} > 0)) || return 0
    for m in "${mounts[@]}"; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
  done
  echo "warning: mounts remain under $dir: $(awk -v d="$dir" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/mounts | tr '\n' ' ')" >&2
  return 1
}
