#!/usr/bin/env bash
# Vendors the Tokio releases of the release matrix (mk/tokio-matrix.mk) into vendor/, from
# local mirrors of tokio-rs/tokio and taiki-e/pin-project-lite, by tag: for each release only
# what `rt-multi-thread,time,sync` needs to build (tokio/Cargo.toml, tokio/src, the license and
# the workspace root Cargo.toml that tokio/Cargo.toml inherits its lints from), as tar.xz.
# Usage: tools/vendor-tokio.sh [TOKIO_MIRROR_GIT_DIR [PIN_PROJECT_LITE_MIRROR_GIT_DIR]]
set -euo pipefail
cd "$(dirname "$0")/.."
TOKIO_GIT=${1:-/work/.mirror/tokio-rs+tokio/repo}
PPL_GIT=${2:-/work/.mirror/taiki-e+pin-project-lite/repo}
TOKIO_TAGS="tokio-1.38.2 tokio-1.43.4 tokio-1.47.5 tokio-1.49.0 tokio-1.53.1"
PPL_TAG=v0.2.17
mkdir -p vendor

for tag in $TOKIO_TAGS; do
	out=vendor/$tag.tar.xz
	git --git-dir="$TOKIO_GIT" archive --format=tar --prefix="$tag/" "$tag" \
		Cargo.toml tokio/Cargo.toml tokio/LICENSE tokio/src | xz -9e > "$out.tmp"
	mv "$out.tmp" "$out"
	echo "$out: $(git --git-dir="$TOKIO_GIT" rev-parse "$tag^{commit}") $(stat -c %s "$out") bytes"
done

name=pin-project-lite-${PPL_TAG#v}
out=vendor/$name.tar.xz
git --git-dir="$PPL_GIT" archive --format=tar --prefix="$name/" "$PPL_TAG" \
	Cargo.toml LICENSE-APACHE LICENSE-MIT src | xz -9e > "$out.tmp"
mv "$out.tmp" "$out"
echo "$out: $(git --git-dir="$PPL_GIT" rev-parse "$PPL_TAG^{commit}") $(stat -c %s "$out") bytes"
