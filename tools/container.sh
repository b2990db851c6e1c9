#!/usr/bin/env bash
# Lays out the container image's build context from a built edgehook binary, so no base
# image is pulled (deploy/container/Containerfile is FROM scratch):
#
#   tools/container.sh BINARY [DIR]     (DIR: target/container by default)
#   podman build --format docker -t edgehook DIR
#
# DIR gets the Containerfile and rootfs.tar, a distroless-style root filesystem:
#   /usr/local/bin/edgehook           the binary, as given
#   exactly the shared libraries `ldd BINARY` lists, at the paths it lists (the dynamic
#                                     loader included); none for a static binary
#   /etc/passwd, /etc/group           root and edgehook (uid and gid 65532, no shell)
#   /etc/nsswitch.conf                hosts: files, then DNS
#   /etc/ssl/certs/ca-certificates.crt  Debian's CA bundle (the ca-certificates package)
#   /tmp                              1777
#   /data                             empty, edgehook's (the image's volume)
# Every file is root's with its mode kept, and the tar's times are fixed, so one binary
# gives the same tar. Any binary: target/release/edgehook for an operator, the test build's
# for CI (host/edgehook/tests/container.rs).
set -euo pipefail

usage() { echo "usage: $0 BINARY [DIR]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
bin=$1
dir=${2:-target/container}
here="$(cd "$(dirname "$0")/.." && pwd)"
containerfile="$here/deploy/container/Containerfile"
ca_bundle=/etc/ssl/certs/ca-certificates.crt
uid=65532

[ -f "$bin" ] && [ -x "$bin" ] || { echo "$bin is not an executable file" >&2; exit 1; }
[ -f "$ca_bundle" ] || { echo "no $ca_bundle: install Debian's ca-certificates" >&2; exit 1; }

mkdir -p "$dir"
root="$dir/rootfs"
rm -rf "$root" "$dir/rootfs.tar"
mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/tmp" "$root/data"
chmod 0755 "$root" "$root/usr" "$root/usr/local" "$root/usr/local/bin" "$root/etc" \
  "$root/etc/ssl" "$root/etc/ssl/certs" "$root/data"
chmod 1777 "$root/tmp"
install -m 0755 "$bin" "$root/usr/local/bin/edgehook"

# The libraries: every absolute path ldd prints ("name => /path (addr)" or "/path (addr)"),
# copied with symlinks resolved to the path the binary asks for. A library ldd cannot find
# is an error; a static binary has none.
ldd_out=$(ldd "$bin" 2>&1) || true
if printf '%s\n' "$ldd_out" | grep -q 'not found'; then
  echo "ldd cannot find a library of $bin:" >&2; printf '%s\n' "$ldd_out" >&2; exit 1
fi
libs=$(printf '%s\n' "$ldd_out" | sed -n -E 's#^[[:space:]]*([^[:space:]]+ => )?(/[^[:space:]]+) \(0x[0-9a-f]+\)$#\2#p')
if [ -z "$libs" ] && ! printf '%s\n' "$ldd_out" | grep -qE 'not a dynamic executable|statically linked'; then
  echo "cannot read ldd's answer for $bin:" >&2; printf '%s\n' "$ldd_out" >&2; exit 1
fi
for lib in $libs; do
  mkdir -p "$root$(dirname "$lib")"
  install -m 0755 "$(readlink -f "$lib")" "$root$lib"
done
find "$root" -type d -exec chmod 0755 {} + && chmod 1777 "$root/tmp"

printf 'root:x:0:0:root:/root:/sbin/nologin\nedgehook:x:%s:%s:edgehook:/data:/sbin/nologin\n' \
  "$uid" "$uid" >"$root/etc/passwd"
printf 'root:x:0:\nedgehook:x:%s:\n' "$uid" >"$root/etc/group"
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/nsswitch.conf"
install -m 0644 "$ca_bundle" "$root/etc/ssl/certs/ca-certificates.crt"

# Everything root's but /data, edgehook's; fixed times and order.
tar_flags=(--sort=name --mtime=@0 --numeric-owner --format=gnu -C "$root")
tar "${tar_flags[@]}" --owner=0 --group=0 --exclude=./data -cf "$dir/rootfs.tar" .
tar "${tar_flags[@]}" --owner="$uid" --group="$uid" -rf "$dir/rootfs.tar" ./data
rm -rf "$root"
cp "$containerfile" "$dir/Containerfile"

echo "$dir: rootfs.tar ($(du -h "$dir/rootfs.tar" | cut -f1)) with $bin and $(printf '%s\n' $libs | grep -c .) libraries; Containerfile"
echo "next: podman build --format docker -t edgehook $dir"
