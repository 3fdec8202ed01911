#!/usr/bin/env bash
# Runs every built-in example through ExecuTorch's PYTHON runtime on aarch64,
# under qemu-aarch64, and compares its outputs with the x86_64 run of the same
# .pte (docs/aarch64.md, "Emulated run: the Python runtime").
#
#   bash tools/release/emulated_run.sh AARCH64_WHEEL [WORK_DIR]
#
# x86_64 half: exports add, bitwise, cnn, erfinv, transformer (and cnn again
# with its weights in a .ptd), runs each with `executorch-tensorrt run
# --outputs`. aarch64 half (tools/release/emulated_runtime.py, one interpreter):
# `import executorch_tensorrt`, the fail-loud refusal without the fallback,
# then `run` and `verify` of each program with the onnxruntime fallback.
# Then tools/release/compare_outputs.py (bit-identical, or within 1e-6).
# ETRT_EMULATED_REUSE=1 keeps WORK_DIR's x86_64 half from an earlier run.
#
# Needs: qemu-user, root (unshare -m: onnxruntime's CPU detection crashes on the
# x86_64 host's /proc/cpuinfo, so an aarch64 one is bound over it), network to
# PyPI once, and an arm64 sysroot in $ETRT_ARM_CACHE/sysroot (below). Torch's
# aarch64 wheel is a CUDA build: its libtorch_cuda.so is loaded at `import
# torch`, so the CUDA wheels it links are installed too (about 4 GB unpacked,
# in the cache, never in the repository). Bounded: the aarch64 half is killed
# after $ETRT_EMULATED_TIMEOUT seconds (default 3600), and runs under nice 19.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PY=$ROOT/.venv/bin/python
WHEEL=$(realpath "${1:?usage: emulated_run.sh AARCH64_WHEEL [WORK_DIR]}")
CACHE=${ETRT_ARM_CACHE:-$HOME/.cache/executorch-tensorrt-arm}
WORK=$(realpath -m "${2:-$CACHE/emulated-work}")
SR=$CACHE/sysroot
SITE=$CACHE/site-python-runtime
TIMEOUT=${ETRT_EMULATED_TIMEOUT:-3600}
pin() { "$PY" -c "import tomllib; print(tomllib.load(open('pins.toml','rb'))['python']['$1'])"; }

command -v qemu-aarch64 >/dev/null || { echo "emulated: qemu-aarch64 not found (apt-get install qemu-user)" >&2; exit 2; }
[ -x "$SR/usr/bin/python3.11" ] || { cat >&2 <<EOF
emulated: no arm64 sysroot at $SR. Make it from Debian 12's arm64 packages:
  dpkg --add-architecture arm64 && apt-get update
  cd \$(mktemp -d) && apt-get download libc6:arm64 libstdc++6:arm64 libgcc-s1:arm64 libgomp1:arm64 \\
    python3.11-minimal:arm64 libpython3.11-minimal:arm64 libpython3.11-stdlib:arm64 libpython3.11:arm64 \\
    libffi8:arm64 libssl3:arm64 zlib1g:arm64 libbz2-1.0:arm64 liblzma5:arm64 libexpat1:arm64 \\
    libuuid1:arm64 libsqlite3-0:arm64 libcrypt1:arm64 libncursesw6:arm64 libtinfo6:arm64 media-types
  for d in *.deb; do dpkg-deb -x \$d $SR; done
EOF
  exit 2; }
case "$WHEEL" in *_aarch64.whl) ;; *) echo "emulated: $WHEEL is not an aarch64 wheel" >&2; exit 2 ;; esac

# The CUDA wheels torch's libraries name in DT_NEEDED (libtorch_cuda.so,
# libtorch_cpu.so, libtorch_python.so), at the versions torch 2.13.0's
# Requires-Dist pins (cuda-toolkit 13.0.3's extras); cusolver and nvtx are left
# out: nothing loads them at import. Another torch pin needs this list redone.
TORCH=$(pin torch)
[ "$TORCH" = "2.13.0" ] || { echo "emulated: the CUDA wheel list is for torch 2.13.0, pins.toml has $TORCH" >&2; exit 2; }
CUDA_WHEELS=('nvidia-cuda-runtime==13.0.96.*' 'nvidia-cublas==13.1.1.3.*' 'nvidia-cuda-cupti==13.0.85.*'
  'nvidia-cuda-nvrtc==13.0.88.*' 'nvidia-cufft==12.0.0.61.*' 'nvidia-cufile==1.15.1.6.*'
  'nvidia-curand==10.4.0.35.*' 'nvidia-cusparse==12.6.3.3.*' 'nvidia-nvjitlink==13.0.88.*'
  nvidia-cudnn-cu13==9.20.0.48 nvidia-cusparselt-cu13==0.8.1 nvidia-nccl-cu13==2.29.7
  nvidia-nvshmem-cu13==3.4.5)
# pip's --platform takes tags literally: every glibc these wheels are tagged with.
PLATFORMS=()
for v in 28 27 26 25 24 18 17; do PLATFORMS+=(--platform "manylinux_2_${v}_aarch64"); done
PLATFORMS+=(--platform manylinux2014_aarch64 --platform any)
install() { "$PY" -m pip install -q --no-deps --no-compile --target "$SITE" "${PLATFORMS[@]}" \
              --only-binary=:all: --python-version 3.11 "$@"; }
# What `import executorch.runtime` (its portable_lib imports executorch.exir)
# and our CLI import at run time, with the wheels' own pins.
PACKAGES=("executorch==$(pin executorch)" "torch==$TORCH" "onnxruntime==$(pin onnxruntime)"
  "onnx==$(pin onnx)" "onnxscript==$(pin onnxscript)" "torchao==$(pin torchao)" numpy ml_dtypes
  protobuf onnx-ir packaging typing_extensions flatbuffers sympy mpmath filelock networkx jinja2
  markupsafe fsspec ruamel.yaml tabulate tqdm "${CUDA_WHEELS[@]}")
STAMP=$SITE/.emulated-run-packages
if [ "$(cat "$STAMP" 2>/dev/null)" != "${PACKAGES[*]}" ]; then
  echo "emulated: installing the aarch64 wheels into $SITE (once per package list)"
  install --upgrade "${PACKAGES[@]}"
  echo "${PACKAGES[*]}" > "$STAMP"
fi
install --upgrade "$WHEEL"

export EXECUTORCH_TENSORRT_FALLBACK=onnxruntime
etrt() { "$PY" -m executorch_tensorrt.cli "$@"; }
if [ "${ETRT_EMULATED_REUSE:-0}" = 1 ] && ls "$WORK"/*.x86.etensors >/dev/null 2>&1; then
  echo "emulated: reusing the x86_64 exports and runs in $WORK (ETRT_EMULATED_REUSE=1)"
  rm -f "$WORK"/*.arm.etensors
else
  echo "emulated: x86_64 exports and runs in $WORK"
  mkdir -p "$WORK"
  rm -f "$WORK"/*.pte "$WORK"/*.ptd "$WORK"/*.etensors "$WORK"/*.expected
  for name in add bitwise cnn erfinv transformer; do
    etrt export --example "$name" "$WORK/$name.pte" >/dev/null 2>&1
  done
  etrt export --example cnn --external-weights "$WORK/cnn_ptd.pte" >/dev/null 2>&1
  [ -f "$WORK/cnn_ptd.ptd" ] || { echo "emulated: export --external-weights wrote no .ptd" >&2; exit 1; }
  for pte in "$WORK"/*.pte; do
    etrt run "$pte" --outputs "${pte%.pte}.x86.etensors" >/dev/null 2>&1
  done
fi

echo "emulated: aarch64 half under qemu-aarch64 (at most $TIMEOUT s)"
unset EXECUTORCH_TENSORRT_FALLBACK
CPUINFO=$WORK/cpuinfo-neoverse-n1
for i in 0 1; do printf 'processor\t: %s\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\n' $i; done > "$CPUINFO"
status=0
start=$(date +%s)
PYTHONPATH=$SITE PYTHONDONTWRITEBYTECODE=1 timeout "$TIMEOUT" nice -n 19 unshare -m sh -c \
  "mount --bind '$CPUINFO' /proc/cpuinfo && exec qemu-aarch64 -cpu neoverse-n1 -L '$SR' \
   '$SR/usr/bin/python3.11' '$ROOT/tools/release/emulated_runtime.py' '$WORK'" || status=$?
echo "emulated: aarch64 half exit $status after $(( $(date +%s) - start )) s"

for x86 in "$WORK"/*.x86.etensors; do
  arm=${x86%.x86.etensors}.arm.etensors
  printf 'emulated: compare %s: ' "$(basename "${x86%.x86.etensors}")"
  if [ -f "$arm" ]; then "$PY" tools/release/compare_outputs.py "$x86" "$arm" | tr '\n' ' ' || status=1
  else printf 'no aarch64 output'; status=1; fi
  echo
done
exit "$status"
