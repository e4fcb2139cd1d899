#!/usr/bin/env bash
# Here (with the CUDA toolkit and the Debian packages installed): build GPU binaries for the H200 once and pack them
# into .device-prebuilt/ (ignored by git through .git/info/exclude), to be carried to the GPU machine so that its calls
# skip the ~90 s build (env.sh's build_gpu installs a carried binary when its stamp matches the tree there, else
# builds it).
#   scripts/device/prebuild.sh [target ...]        default: test_gpu bench_train_step
#   PREBUILD_DIR=build-lead scripts/device/prebuild.sh ...   an existing Release + sm_90a build directory to reuse
# Carry both: run(carry: [".device-deps", ".device-prebuilt"]). The stamp is env.sh's tree_stamp (a hash of the
# sources the binaries are compiled from), so a binary older than the tree is never installed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(test_gpu bench_train_step)
dir=${PREBUILD_DIR:-build-prebuilt}
if [ ! -f "$dir/CMakeCache.txt" ]; then
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DSWIFT_CUDA_GENCODE="-gencode arch=compute_90a,code=sm_90a" > /dev/null
fi
grep -q "SWIFT_CUDA_GENCODE:STRING=-gencode arch=compute_90a,code=sm_90a" "$dir/CMakeCache.txt" \
  || { echo "prebuild: $dir is not configured for sm_90a" >&2; exit 1; }
grep -q "CMAKE_BUILD_TYPE:STRING=Release" "$dir/CMakeCache.txt" || { echo "prebuild: $dir is not a Release build" >&2; exit 1; }
cmake --build "$dir" -j"$(nproc)" --target "${targets[@]}"
grep -qx "/.device-prebuilt/" .git/info/exclude 2>/dev/null || echo "/.device-prebuilt/" >> .git/info/exclude
rm -rf .device-prebuilt
mkdir -p .device-prebuilt
source scripts/device/stamp.sh
for t in "${targets[@]}"; do
  path=$(cd "$dir" && find . -maxdepth 2 -type f -name "$t" -perm -u+x | head -1)
  [ -n "$path" ] || { echo "prebuild: no binary named $t under $dir" >&2; exit 1; }
  strip --strip-unneeded -o ".device-prebuilt/$t" "$dir/$path"
  gzip -9 ".device-prebuilt/$t"
  echo "$t ${path#./}" >> .device-prebuilt/manifest
done
tree_stamp > .device-prebuilt/stamp
echo "$root" > .device-prebuilt/source_root  # the tests' fixture paths are compiled in under this root
du -sh .device-prebuilt
echo "prebuild: $(cat .device-prebuilt/stamp) ${targets[*]}"
