"""The C++ runner's decode mode (examples/cpp_runner/decode.h): greedy decoding of
an exported LLM through ExecuTorch's C++ API, KV cache inside the TensorRT
delegate (onnxruntime fallback, in the interpreter the adapter embeds), gives
eager PyTorch's tokens."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import torch

from helpers import FALLBACK
from test_cmake_package import ROUTES, cmake_for, configure_and_build, prefix_path_args
from test_cpp_runner import RUNNER_SRC, run

PROMPT = list(range(3, 11))


@pytest.fixture(scope="module")
def runner(tmp_path_factory) -> Path:
    build = tmp_path_factory.mktemp("cpp-runner-decode")
    configure_and_build(cmake_for(ROUTES[0]), RUNNER_SRC, build, *prefix_path_args())
    return build / "etrt_runner"


@pytest.fixture(scope="module")
def decoder_pte(tmp_path_factory):
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from executorch_tensorrt.aot.partition.partitioner import TensorRTPartitioner
    from executorch_tensorrt.examples import llm as lm

    torch.manual_seed(1)
    model = lm.CachedDecoder().eval().requires_grad_(False)
    eager = copy.deepcopy(model)
    edge = to_edge_transform_and_lower(
        lm.export_cached_decoder(model), partitioner=[TensorRTPartitioner(progress=None)],
        compile_config=EdgeCompileConfig(_check_ir_validity=False))
    path = tmp_path_factory.mktemp("llm") / "decoder.pte"
    path.write_bytes(edge.to_executorch().buffer)
    return eager, path


@pytest.fixture(scope="module")
def llama_pte(tmp_path_factory):
    """transformers' own ExecuTorch flow (TorchExportableModuleForDecoderOnlyLM,
    one method with a dynamic sequence), tiny random Llama."""
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from executorch_tensorrt.aot.partition.partitioner import TensorRTPartitioner
    from executorch_tensorrt.examples import llm as lm
    from executorch_tensorrt.llm.hf_export import export_hf

    wrapper = lm.hf_tiny_llama()
    wrapper.requires_grad_(False)
    eager = copy.deepcopy(wrapper)
    edge = to_edge_transform_and_lower(
        export_hf(wrapper), partitioner=[TensorRTPartitioner(progress=None)],
        compile_config=EdgeCompileConfig(_check_ir_validity=False))
    path = tmp_path_factory.mktemp("llama") / "llama.pte"
    path.write_bytes(edge.to_executorch().buffer)
    return (lambda t, p: eager.model(input_ids=t, cache_position=p)), path


@pytest.mark.parametrize("program", ["decoder_pte", "llama_pte"])
def test_runner_decode_matches_eager(runner, program, request):
    from executorch_tensorrt.llm.greedy_decode import greedy_decode

    eager, path = request.getfixturevalue(program)
    proc = run(runner, "--model_path", str(path), "--decode", "32", "--prompt",
               ",".join(map(str, PROMPT)), **FALLBACK)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tokens = [int(t) for t in re.search(r"tokens: (.*)", proc.stdout).group(1).split(",")]
    assert tokens == greedy_decode(eager, PROMPT, 32).tokens
    assert re.search(r"decode: [0-9.]+ us/token over 31 calls", proc.stdout)


def test_runner_decode_past_the_cache_names_the_limit(runner, decoder_pte):
    _eager, path = decoder_pte
    proc = run(runner, "--model_path", str(path), "--decode", "48", "--prompt", "1,2,3",
               **FALLBACK)
    assert proc.returncode == 1
    assert "cache position 48" in proc.stderr and "valid positions are 0..47" in proc.stderr


def test_runner_decode_usage(runner, decoder_pte):
    proc = run(runner, "--model_path", str(decoder_pte[1]), "--decode", "4", "--prompt", "1,x",
               **FALLBACK)
    assert proc.returncode == 2 and "--prompt" in proc.stderr


def test_runner_decode_prompts_each_start_from_the_initial_state(runner, decoder_pte):
    """';' separates prompts; the runner reloads the method between them, which
    destroys the delegate and its cache (the C++ way to reset)."""
    from executorch_tensorrt.llm.greedy_decode import greedy_decode

    eager, path = decoder_pte
    prompt = ",".join(map(str, PROMPT))
    proc = run(runner, "--model_path", str(path), "--decode", "8", "--prompt",
               f"{prompt};5,6;{prompt}", **FALLBACK)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = [[int(t) for t in m.split(",")] for m in re.findall(r"tokens: (.*)", proc.stdout)]
    fresh = lambda p: greedy_decode(copy.deepcopy(eager), p, 8).tokens  # noqa: E731
    assert runs == [fresh(PROMPT), fresh([5, 6]), fresh(PROMPT)]


@pytest.fixture(scope="module")
def llama_batch2_pte(tmp_path_factory):
    """A static batch of 2 rows, at most 4 tokens per call: prompts are prefilled in chunks."""
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from executorch_tensorrt.aot.partition.partitioner import TensorRTPartitioner
    from executorch_tensorrt.examples import llm as lm
    from executorch_tensorrt.llm.hf_export import export_hf

    wrapper = lm.hf_tiny_llama(batch_size=2)
    wrapper.requires_grad_(False)
    eager = copy.deepcopy(wrapper)
    edge = to_edge_transform_and_lower(
        export_hf(wrapper, max_seq=4, batch_size=2),
        partitioner=[TensorRTPartitioner(progress=None)],
        compile_config=EdgeCompileConfig(_check_ir_validity=False))
    path = tmp_path_factory.mktemp("llama2") / "llama2.pte"
    path.write_bytes(edge.to_executorch().buffer)
    return (lambda t, p: eager.model(input_ids=t, cache_position=p)), path


def test_runner_prefills_a_prompt_longer_than_the_method_in_chunks(runner, llama_pte):
    """40 tokens into a method that takes at most 16 per call (3 chunks)."""
    from executorch_tensorrt.llm.greedy_decode import greedy_decode

    eager, path = llama_pte
    prompt = [(7 * i) % 120 + 1 for i in range(40)]
    proc = run(runner, "--model_path", str(path), "--decode", "8", "--prompt",
               ",".join(map(str, prompt)), **FALLBACK)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tokens = [int(t) for t in re.search(r"tokens: (.*)", proc.stdout).group(1).split(",")]
    assert tokens == greedy_decode(eager, prompt, 8).tokens


def test_runner_decodes_a_batch_each_row_as_eager(runner, llama_batch2_pte):
    """Two rows of 16 tokens (4x the method's 4 per call), decoded together."""
    from executorch_tensorrt.llm.greedy_decode import greedy_decode

    eager, path = llama_batch2_pte
    rows = [[(5 * i + r) % 120 + 1 for i in range(16)] for r in range(2)]
    proc = run(runner, "--model_path", str(path), "--decode", "6", "--prompt",
               "|".join(",".join(map(str, row)) for row in rows), **FALLBACK)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = [[int(t) for t in re.search(rf"tokens\[{r}\]: (.*)", proc.stdout).group(1).split(",")]
           for r in range(2)]
    want = greedy_decode(eager, torch.tensor(rows), 6).rows
    assert got == want and got[0] != got[1]


def test_runner_batch_needs_one_prompt_per_row(runner, llama_batch2_pte):
    path = llama_batch2_pte[1]
    proc = run(runner, "--model_path", str(path), "--decode", "2", "--prompt", "1,2,3",
               **FALLBACK)
    assert proc.returncode == 2 and "batch of 2 row(s); --prompt gave 1" in proc.stderr
    proc = run(runner, "--model_path", str(path), "--decode", "2", "--prompt", "1,2,3|4,5",
               **FALLBACK)
    assert proc.returncode == 2 and "equal length" in proc.stderr
