# OCI image layouts written by hand, for images built locally and imported
# into containerd (there is no registry). Sourced by hack/images.sh and
# hack/e2e-images.sh; the caller defines die() and PROG.
#
#   oci_begin WORK                 start a layout in WORK/layout
#   oci_layer WORK ROOTFS          tar ROOTFS reproducibly into a layer blob;
#                                  prints "DIGEST SIZE"
#   oci_image WORK NAME CONFIG LAYER...
#                                  add image NAME: CONFIG is the JSON of the image
#                                  config's "config" object, each LAYER "DIGEST SIZE"
#   oci_finish WORK OUT            write OUT/images.tar (every image added) and
#                                  OUT/refs ("NAME DIGEST" per image), atomically
#   oci_import SOCKET OUT          import OUT/images.tar into containerd's k8s.io
#                                  namespace unless every name already points at
#                                  its digest; then check that they do
#   oci_arch                       this machine's OCI architecture name
#   copy_with_libs ROOTFS BIN [DEST]
#                                  copy a dynamically linked program and every
#                                  shared library ldd names into ROOTFS
#
# Everything is byte-for-byte reproducible for the same inputs.

OCI_NAMESPACE=k8s.io
# tar options that make the archives reproducible
OCI_TAR_OPTS=(--sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu)

oci_arch() {
  case "$(uname -m)" in
  x86_64) echo amd64 ;;
  aarch64 | arm64) echo arm64 ;;
  armv7l) echo arm ;;
  ppc64le) echo ppc64le ;;
  s390x) echo s390x ;;
  riscv64) echo riscv64 ;;
  *) die "unsupported machine architecture $(uname -m)" ;;
  esac
}

_oci_sha256() {
  local sum
  sum=$(sha256sum "$1") || die "sha256sum $1 failed"
  printf '%s\n' "${sum%% *}"
}

# _oci_blob WORK FILE: move FILE into the layout's blob store; prints its digest.
_oci_blob() {
  local hex
  hex=$(_oci_sha256 "$2")
  mv -f "$2" "$1/layout/blobs/sha256/$hex"
  echo "sha256:$hex"
}

oci_begin() {
  mkdir -p "$1/layout/blobs/sha256"
  : >"$1/entries"
  : >"$1/refs"
}

oci_layer() {
  local work=$1 rootfs=$2 top=() size
  mapfile -t top < <(ls -A "$rootfs")
  tar "${OCI_TAR_OPTS[@]}" -C "$rootfs" -cf "$work/layer.tar" "${top[@]}" ||
    die "creating the layer tar of $rootfs failed"
  size=$(stat -c %s "$work/layer.tar")
  echo "$(_oci_blob "$work" "$work/layer.tar") $size"
}

oci_image() {
  local work=$1 name=$2 config=$3
  shift 3
  local arch diff_ids="" layers="" layer digest size
  arch=$(oci_arch)
  for layer in "$@"; do
    read -r digest size <<<"$layer"
    diff_ids+="${diff_ids:+,}\"$digest\""
    layers+="${layers:+,}{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"$digest\",\"size\":$size}"
  done
  printf '{"architecture":"%s","os":"linux","created":"1970-01-01T00:00:00Z","config":%s,' "$arch" "$config" >"$work/config.json"
  printf '"rootfs":{"type":"layers","diff_ids":[%s]},' "$diff_ids" >>"$work/config.json"
  printf '"history":[{"created":"1970-01-01T00:00:00Z","created_by":"rkubelet %s"}]}' "$PROG" >>"$work/config.json"
  size=$(stat -c %s "$work/config.json")
  digest=$(_oci_blob "$work" "$work/config.json")
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[%s]}' \
    "$digest" "$size" "$layers" >"$work/manifest.json"
  size=$(stat -c %s "$work/manifest.json")
  digest=$(_oci_blob "$work" "$work/manifest.json")
  printf '{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"platform":{"architecture":"%s","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}\n' \
    "$digest" "$size" "$arch" "$name" "$name" >>"$work/entries"
  echo "$name $digest" >>"$work/refs"
}

oci_finish() {
  local work=$1 out=$2 joined
  joined=$(paste -sd, "$work/entries")
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s]}' \
    "$joined" >"$work/layout/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$work/layout/oci-layout"
  mkdir -p "$work/out"
  tar "${OCI_TAR_OPTS[@]}" -C "$work/layout" -cf "$work/out/images.tar" oci-layout index.json blobs ||
    die "creating the image archive failed"
  cp "$work/refs" "$work/out/refs"
  # publish atomically; a concurrent run may have won the race
  mkdir -p "$(dirname "$out")"
  if ! mv -T "$work/out" "$out" 2>/dev/null; then
    [[ -f "$out/images.tar" && -f "$out/refs" ]] || die "cannot write the image cache to $out"
  fi
}

# _oci_digest_of LISTING NAME: the manifest digest NAME points at in containerd.
_oci_digest_of() {
  awk -v n="$2" '$1 == n { print $3 }' <<<"$1"
}

oci_import() {
  local socket=$1 out=$2 listing name digest stale=0 said
  local ctr=(ctr --connect-timeout 5s -a "$socket" -n "$OCI_NAMESPACE")
  listing=$("${ctr[@]}" images ls 2>&1) || die "cannot list images on $socket: $listing"
  while read -r name digest; do
    [[ "$(_oci_digest_of "$listing" "$name")" == "$digest" ]] || stale=1
  done <"$out/refs"
  ((stale)) || return 0
  said=$("${ctr[@]}" images import "$out/images.tar" 2>&1) ||
    die "importing $out/images.tar into $socket failed: $said"
  listing=$("${ctr[@]}" images ls 2>&1) || die "cannot list images on $socket: $listing"
  while read -r name digest; do
    [[ "$(_oci_digest_of "$listing" "$name")" == "$digest" ]] ||
      die "after the import, $name does not point at $digest; ctr said: $said"
  done <"$out/refs"
}

copy_with_libs() {
  local rootfs=$1 bin=$2 dest=${3:-$2} lib
  [[ -x $bin ]] || die "$bin not found"
  mkdir -p "$rootfs$(dirname "$dest")"
  cp -L "$bin" "$rootfs$dest"
  # "libx.so.1 => /lib/x/libx.so.1 (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)"
  while read -r lib; do
    [[ -n $lib && ! -e $rootfs$lib ]] || continue
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
  done < <(ldd "$bin" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
}
