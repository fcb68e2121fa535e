#!/bin/sh
# burn-sam's GPU check (built by `cargo xtask gpu-bundle`). Needs the NVIDIA driver and NVRTC,
# which CubeCL compiles its CUDA kernels with (any CUDA 12 or 13 toolkit, or the pip package
# nvidia-cuda-nvrtc); no Rust, no network. Runs the suite in f32 and f16, the examples in f16,
# SAM's cost and its kernel launches, cold (an empty kernel-cache/ that the stages share), then
# again warm; then SAM's cost on the two realistic models with the build that has Burn's
# autotune (gpu-check-autotune, its own kernel-cache-autotune/), cold and warm. Writes
# gpu-report.json after every stage and prints a table.
# Extra arguments go to `gpu-check all` (for example `--time-scale 2` on a slow host).
set -u
cd "$(dirname "$0")" || exit 1

# The folder of the first library named $1 or $1.<version>: the loader's cache, the library
# path, the usual install places, then Python's site-packages and /opt.
find_library() {
  found=$(ldconfig -p 2>/dev/null | grep -o "/[^ ]*/$1[.0-9]*\$" | head -n 1)
  if [ -z "$found" ]; then
    for dir in $(echo "${LD_LIBRARY_PATH:-}" | tr ':' ' ') /usr/local/nvidia/lib64 \
      /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 \
      /usr/local/cuda*/targets/x86_64-linux/lib; do
      for file in "$dir/$1" "$dir/$1".[0-9]*; do
        [ -e "$file" ] && found=$file && break 2
      done
    done
  fi
  if [ -z "$found" ]; then
    sites=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
    for dir in $sites /opt; do
      found=$(find "$dir" -name "$1*" ! -name "*.py" 2>/dev/null | head -n 1)
      [ -n "$found" ] && break
    done
  fi
  [ -n "$found" ] && dirname "$found"
}

if [ ! -e /dev/nvidiactl ] || ! driver=$(find_library libcuda.so); then
  echo "error: no NVIDIA driver here (/dev/nvidiactl and libcuda.so): run this on a host with an NVIDIA GPU" >&2
  exit 1
fi
if ! nvrtc=$(find_library libnvrtc.so); then
  echo "error: NVRTC (libnvrtc.so) not found: install a CUDA toolkit or \`pip install nvidia-cuda-nvrtc\`" >&2
  exit 1
fi
export LD_LIBRARY_PATH="$driver:$nvrtc${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

for binary in gpu-check gpu-check-autotune; do
  if [ ! -x $binary ] && [ -e $binary.gz ]; then
    gzip -dc $binary.gz >$binary && chmod +x $binary || exit 1
  fi
done
exec ./gpu-check all --out gpu-report.json --logs gpu-logs --data digits.csv.gz "$@"
