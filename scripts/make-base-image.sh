#!/usr/bin/env bash
# make-base-image.sh — build a local Debian 12 (bookworm) base image with mmdebstrap, for sites
# (and this machine) that cannot pull debian:bookworm from a registry. The result is stored in
# buildah's local storage as localhost/debian:bookworm; build the project image on top of it:
#
#   scripts/make-base-image.sh                      # needs: apt-get install mmdebstrap buildah
#   buildah --storage-driver vfs bud --isolation chroot \
#           --build-arg BASE=localhost/debian:bookworm -t outlierlab -f Containerfile .
#
# Environment (all optional):
#   IMAGE=localhost/debian:bookworm    name of the image to create
#   STORAGE_DRIVER=vfs                 buildah storage driver (vfs needs no kernel overlay support)
#   MIRROR=http://deb.debian.org/debian          Debian mirror (a local mirror works)
#   SECURITY=http://deb.debian.org/debian-security   security mirror ("" to leave it out)
#   VARIANT=apt                        mmdebstrap variant: Essential packages + apt
#   KEEP_TAR=path                      keep the root file system tarball there
set -euo pipefail

IMAGE=${IMAGE:-localhost/debian:bookworm}
STORAGE_DRIVER=${STORAGE_DRIVER:-vfs}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SECURITY=${SECURITY-http://deb.debian.org/debian-security}
VARIANT=${VARIANT:-apt}

for tool in mmdebstrap buildah; do
  command -v "$tool" >/dev/null || { echo "make-base-image: $tool not found; run: apt-get install -y mmdebstrap buildah" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tarball=${KEEP_TAR:-$work/rootfs.tar}

sources=("deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main")
[ -n "$SECURITY" ] && sources+=("deb $SECURITY bookworm-security main")

echo "make-base-image: mmdebstrap --variant=$VARIANT bookworm -> $tarball"
# --skip=cleanup/apt/lists would keep the package lists; we drop them as the official image does.
mmdebstrap --variant="$VARIANT" --format=tar bookworm "$tarball" "${sources[@]}"

echo "make-base-image: importing into buildah ($STORAGE_DRIVER) as $IMAGE"
ctr=$(buildah --storage-driver "$STORAGE_DRIVER" from scratch)
buildah --storage-driver "$STORAGE_DRIVER" add "$ctr" "$tarball" /
buildah --storage-driver "$STORAGE_DRIVER" config --cmd /bin/bash \
        --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
buildah --storage-driver "$STORAGE_DRIVER" commit --rm "$ctr" "$IMAGE" >/dev/null
buildah --storage-driver "$STORAGE_DRIVER" images "$IMAGE"
echo "make-base-image: done: $IMAGE"
