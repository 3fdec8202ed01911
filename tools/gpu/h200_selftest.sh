#!/usr/bin/env bash
# doctor, selftest and bench on the GPU machine of the device tool, where no
# real TensorRT engine can run: once as they are (the refusal must be named)
# and once over the FAKE, labelled stand-in context (tools/gpu/stand_in_engine.py,
# which runs x + y partitions only). Run from the repository root with .whl/
# holding the cp312 executorch wheel, this package's wheel, ruamel_yaml's wheel
# and battery/ (selftest --export-only, made on an x86_64 machine).
#   bash tools/gpu/h200_selftest.sh OUT_DIR
set -uo pipefail
OUT=$(realpath -m "$1"); mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/tools/gpu PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
etrt() { python3 -m executorch_tensorrt "$@"; echo "== exit $?"; }
FAKE=(env EXECUTORCH_TENSORRT_TEST_STAND_IN=stand_in_engine)
echo "### doctor"; etrt doctor .whl/battery/add/add.pte
echo "### doctor, stand-in"; "${FAKE[@]}" python3 -m executorch_tensorrt doctor --json \
  .whl/battery/add/add.pte > "$OUT/doctor-stand-in.json"; echo "== exit $?"
echo "### selftest"; etrt selftest --programs .whl/battery --out "$OUT/selftest" --calls 200
echo "### selftest, stand-in"; "${FAKE[@]}" python3 -m executorch_tensorrt selftest \
  --programs .whl/battery --out "$OUT/selftest-stand-in" --calls 200; echo "== exit $?"
echo "### bench, stand-in"; "${FAKE[@]}" python3 -m executorch_tensorrt bench \
  .whl/battery/add/add.pte --iterations 1000 --partitions --json > "$OUT/bench-stand-in.json"; echo "== exit $?"
cat "$OUT/bench-stand-in.json" | head -40
find "$OUT" -name "*.etensors" -delete
