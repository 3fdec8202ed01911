"""The LLM export path holds the weights once while torch.export traces:
strict torch.export (dynamo) would otherwise keep a clone of every weight
(llm/hf_export.py `_parameters_not_cloned_by_dynamo`). Measured in a child
process: its peak resident memory (VmHWM, reset just before the trace) over
the memory before it, against the model's weight bytes."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[2])
from proc_status import reset_peak, status
from executorch_tensorrt.llm import causal_lm
from executorch_tensorrt.llm.hf_export import export_hf, hf_static_cache_wrapper

model = causal_lm(json.loads(sys.argv[1]), dtype=torch.bfloat16)
weights = sum(p.numel() * p.element_size() for p in model.parameters())
wrapper = hf_static_cache_wrapper(model, 32)
before = status("VmRSS")
reset_peak()
export_hf(wrapper, 4)
print(json.dumps({"weights": weights, "growth": status("VmHWM") - before}))
"""

# ~180 MB of bf16 weights: big enough that a clone of them dwarfs what the
# trace itself allocates.
CONFIG = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 1024,
          "intermediate_size": 2048, "num_hidden_layers": 2, "num_attention_heads": 8,
          "num_key_value_heads": 4, "max_position_embeddings": 64, "tie_word_embeddings": False}


def test_torch_export_of_an_llm_does_not_copy_its_weights():
    run = subprocess.run([sys.executable, "-c", CHILD, json.dumps(CONFIG), str(TESTS)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    measured = json.loads(run.stdout.strip().splitlines()[-1])
    assert measured["weights"] > 150e6
    # A clone of the weights would add >= 1.0x; the trace itself stays well under.
    assert measured["growth"] < 0.35 * measured["weights"], measured
