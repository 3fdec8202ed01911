"""A published int4 checkpoint exports holding its weights once: no float copy
of a quantized weight (torch.export's clones, ONNX export, placeholders, the
codes' recoding, named data, the eager reference's forwards) and no second
copy of the codes.

Each export runs in its own child process, which first imports everything and
exports a tiny checkpoint (torch, transformers, onnx and TensorRT's parser
loaded), then reads its resident memory (the baseline, subtracted), resets
its peak and exports the checkpoint measured: its growth is the checkpoint
held plus the export's transients (the trace's graph, the reference's blocks,
ONNX's graph), which do not depend on the number of layers. So two
checkpoints of the same widths, one and two Llama-3-8B-shaped layers, are
exported, and what the second layer adds to the peak is compared with what it
adds to the checkpoint. Measured 1.53x (the goal for an 8B-shaped checkpoint
is 1.3x; docs/evidence/checkpoints.md): the bound here is 1.6x, under which a
second copy of the codes (1x more) or a float16 copy of the weights (4x more)
cannot pass."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from proc_status import reset_peak, status
from executorch_tensorrt import llm

def export(folder, out):
    model, _ = llm.from_checkpoint(folder)
    llm.export(model, max_seq_len=4, max_context_len=16, dtype="float16", output=out,
               external_weights=True, run_check=False, record_memory=False, progress=None)

warm_up, folder = Path(sys.argv[2]), Path(sys.argv[3])
export(warm_up, warm_up.with_suffix(".pte"))
before = status("VmRSS")
reset_peak()
export(folder, folder.with_suffix(".pte"))
print(json.dumps({"growth": status("VmHWM") - before}))
"""

# One Llama-3-8B layer (hidden 4096, intermediate 14336, 8 KV heads of 32) with
# a small vocabulary: the codes are most of each checkpoint.
LAYER = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 1024,
         "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 1,
         "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 64,
         "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False}
WARM_UP = {**LAYER, "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 2,
           "num_key_value_heads": 1}


def _growth(tmp_path, name: str, layers: int) -> tuple[int, int]:
    from checkpoint_writers import write_gptq_shards

    packed = write_gptq_shards(tmp_path / name, {**LAYER, "num_hidden_layers": layers})
    run = subprocess.run([sys.executable, "-c", CHILD, str(TESTS), str(tmp_path / "warm-up"),
                          str(tmp_path / name)], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    return packed, json.loads(run.stdout.strip().splitlines()[-1])["growth"]


def test_an_int4_checkpoints_layers_cost_their_bytes_at_export(tmp_path):
    from checkpoint_writers import write_gptq_shards

    write_gptq_shards(tmp_path / "warm-up", WARM_UP)
    one = _growth(tmp_path, "one", 1)
    two = _growth(tmp_path, "two", 2)
    layer_bytes, layer_growth = two[0] - one[0], two[1] - one[1]
    assert layer_bytes > 100e6  # one layer's codes and scales
    assert layer_growth < 1.6 * layer_bytes, (layer_growth / layer_bytes, one, two)
