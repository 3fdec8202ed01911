"""Published quantized checkpoints (GPTQ, AWQ, compressed-tensors, GGUF), written here
from tiny llama and qwen2 configs: each reader's PackedWeight dequantizes bit-exactly
to the format's own reference, the model built from the checkpoint computes the
logits of a float model holding those reference weights, and bad inputs are
refused by name."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as K

from checkpoint_writers import (CONFIGS, write_awq, write_compressed_tensors, write_gguf,
                                write_gptq)
from executorch_tensorrt.errors import CheckpointError
from executorch_tensorrt.llm import from_checkpoint
from executorch_tensorrt.quantization.checkpoints import read_checkpoint
from executorch_tensorrt.quantization.packed_linear import PackedLinear

ARCHS = ["llama", "qwen2"]  # llama-small is the fuzzers' seed
MORE_ARCHS = ARCHS + ["qwen3", "phi3"]  # q/k norms, head_dim from the metadata, fused Linears
GGUF_ARCHS = MORE_ARCHS + ["gemma2", "gemma3"]  # four norms stored plus one, soft-caps
GGUF_IMPORTED = {"default": K.Q4_K, "attn_q": K.Q4_0, "attn_k": K.Q4_1, "ffn_down": K.Q8_0,
                 "output": K.Q8_0}


def assert_bit_exact(ckpt, refs, cast=None):
    assert set(ckpt.packed) == set(refs)
    for name, ref in refs.items():
        got = ckpt.packed[name].dequantize()
        got = got if cast is None else got.to(cast)
        assert got.dtype == ref.dtype and torch.equal(got, ref), name


def assert_model_matches(path, model, refs, **kw):
    """The checkpoint's model (PackedLinear in each quantized Linear's place) gives the
    logits of the float model holding the reference weights."""
    loaded, ckpt = from_checkpoint(path, **kw)
    packed = {n for n, m in loaded.named_modules() if isinstance(m, PackedLinear)}
    assert packed == set(refs) == set(ckpt.packed)
    with torch.no_grad():
        for name, w in refs.items():
            model.get_submodule(name).weight.copy_(w)
        for key, t in ckpt.tensors.items():
            model.state_dict()[key].copy_(t)
        tokens = torch.tensor([[1, 5, 17, 42, 7, 3]])
        want = model(tokens).logits
        got = loaded(tokens).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert not torch.equal(got, torch.zeros_like(got))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("bits, act_order, v1, sym", [(4, True, True, False),
                                                      (4, False, False, True),
                                                      (8, True, True, False)])
def test_gptq_bit_exact(tmp_path, arch, bits, act_order, v1, sym):
    _, ref32, ref16 = write_gptq(tmp_path, arch, bits=bits, act_order=act_order, v1=v1, sym=sym)
    ckpt = read_checkpoint(tmp_path)
    assert ckpt.format == "gptq"
    assert_bit_exact(ckpt, ref32)
    assert_bit_exact(ckpt, ref16, cast=torch.float16)  # AutoGPTQ computes in float16
    some = next(iter(ckpt.packed.values()))
    assert (some.input_order is not None) == act_order
    assert (some.zero_points is None) == sym  # midpoint zeros are the symmetric form


@pytest.mark.parametrize("arch", MORE_ARCHS)
def test_gptq_model(tmp_path, arch):
    model, ref32, _ = write_gptq(tmp_path, arch, act_order=True)
    assert_model_matches(tmp_path, model, ref32)


@pytest.mark.parametrize("arch", MORE_ARCHS)
def test_awq_bit_exact_and_model(tmp_path, arch):
    model, refs = write_awq(tmp_path, arch)
    ckpt = read_checkpoint(tmp_path)
    assert ckpt.format == "awq"
    assert_bit_exact(ckpt, refs)
    assert_model_matches(tmp_path, model, refs)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("bits, symmetric, strategy, scale_dtype", [
    (4, True, "group", torch.float32), (4, False, "group", torch.float32),
    (8, False, "channel", torch.float32), (4, True, "group", torch.bfloat16)])
def test_compressed_tensors_bit_exact(tmp_path, arch, bits, symmetric, strategy, scale_dtype):
    _, refs = write_compressed_tensors(tmp_path, arch, bits=bits, symmetric=symmetric,
                                       strategy=strategy, scale_dtype=scale_dtype)
    ckpt = read_checkpoint(tmp_path)
    assert ckpt.format == "compressed-tensors"
    # the compressor computes in the scales' dtype: our float32 rounded to it is bit-exact
    assert_bit_exact(ckpt, refs, cast=scale_dtype)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("symmetric", [True, False])
def test_compressed_tensors_act_order_group(tmp_path, arch, symmetric):
    """weight_g_idx: bit-exact to compressed-tensors' own group dequantization of
    the sorted columns, read as an input order; the model computes the same logits."""
    model, refs = write_compressed_tensors(tmp_path, arch, symmetric=symmetric, act_order=True)
    ckpt = read_checkpoint(tmp_path)
    assert_bit_exact(ckpt, refs)
    assert all(p.input_order is not None for p in ckpt.packed.values())
    assert_model_matches(tmp_path, model, refs)


def test_compressed_tensors_g_idx_refusals(tmp_path):
    from safetensors.torch import load_file, save_file

    write_compressed_tensors(tmp_path, "llama-small", act_order=True)
    st = tmp_path / "model.safetensors"
    tensors = load_file(str(st))
    name = "model.layers.0.mlp.up_proj.weight_g_idx"
    good = tensors[name].clone()
    for bad, pattern in [(torch.zeros(64, dtype=torch.int32), r"g_idx's group sizes is 0\.\.64"),
                         (torch.cat([good[:1] * 0 - 1, good[1:]]), r"entries of -1 is 1"),
                         (good.float(), r"weight_g_idx: dtype and shape is torch\.float32"),
                         (good[:32], r"an integer \[64\]")]:
        save_file({**tensors, name: bad}, str(st))
        with pytest.raises(CheckpointError, match=pattern):
            read_checkpoint(tmp_path)
    save_file({**tensors, name: torch.full_like(good, -1)}, str(st))  # not calibrated
    assert read_checkpoint(tmp_path).packed["model.layers.0.mlp.up_proj"].input_order is None


@pytest.mark.parametrize("arch", MORE_ARCHS)
def test_compressed_tensors_model(tmp_path, arch):
    model, refs = write_compressed_tensors(tmp_path, arch, symmetric=False)
    assert_model_matches(tmp_path, model, refs)


@pytest.mark.parametrize("arch", GGUF_ARCHS)
def test_gguf_bit_exact_and_model(tmp_path, arch):
    path = tmp_path / f"{arch}.gguf"
    fused = {"attn_qkv": K.Q4_0, "ffn_up": K.Q4_1}  # phi3 has no attn_q / attn_k
    model, refs = write_gguf(path, arch, {**GGUF_IMPORTED, **fused}, embed_kind=K.Q8_0)
    ckpt = read_checkpoint(path)
    assert ckpt.format == "gguf"
    assert_bit_exact(ckpt, refs)
    kinds = {(p.bits, p.zero_points is None, p.offsets is not None, p.group_size)
             for p in ckpt.packed.values()}
    assert kinds >= {(4, True, False, 32), (4, True, True, 32), (8, True, False, 32)}
    for key, value in CONFIGS[arch].items():
        if key not in ("architectures", "rope_theta", "rope_local_base_freq", "pad_token_id",
                       "bos_token_id", "eos_token_id"):  # no tokenizer in these files
            want = pytest.approx(value, rel=1e-6) if isinstance(value, float) else value
            assert ckpt.config.get(key) == want, key  # GGUF holds float32
    state = model.state_dict()
    for key, t in ckpt.tensors.items():  # norms as transformers applies them (Gemma: minus one)
        if "norm" in key:
            torch.testing.assert_close(t, state[key], rtol=0, atol=1e-6)
    assert_model_matches(path, model, refs)


@pytest.mark.parametrize("arch", ARCHS)
def test_gguf_k_quants_refused_or_requantized(tmp_path, arch):
    path = tmp_path / f"{arch}.gguf"
    model, refs = write_gguf(path, arch, {"default": K.Q6_K, "attn_q": K.Q5_K})
    with pytest.raises(CheckpointError, match=r"blk\.0\.attn_q\.weight: type is Q5_K.*"
                                              r"unsupported='requantize'"):
        read_checkpoint(path)
    ckpt = read_checkpoint(path, unsupported="requantize")
    assert set(ckpt.requantized) == set(refs)
    for name, ref in refs.items():
        packed = ckpt.packed[name]
        assert (packed.bits, packed.group_size) == (8, packed.in_features)
        worst = float((packed.dequantize() - ref).abs().max())
        assert worst == ckpt.requantized[name]
        assert 0 < worst <= float(ref.abs().amax(1).max()) / 254 * 1.0001  # half an int8 step
    assert any("re-quantized to int8" in n and "worst weight error" in n for n in ckpt.notes)


def test_gptq_refusals_name_the_field(tmp_path):
    write_gptq(tmp_path, "llama")
    config = json.loads((tmp_path / "config.json").read_text())
    for change, pattern in [({"bits": 3}, r"gptq bits is 3"),
                            ({"checkpoint_format": "marlin"}, r"checkpoint_format is 'marlin'"),
                            ({"group_size": 64}, r"scales: dtype and shape")]:
        bad = {**config, "quantization_config": {**config["quantization_config"], **change}}
        (tmp_path / "config.json").write_text(json.dumps(bad))
        with pytest.raises(CheckpointError, match=pattern):
            read_checkpoint(tmp_path)


@pytest.mark.parametrize("arch, group", [("llama", 32), ("qwen2", 64), ("phi3", 128)])
def test_awq_gemv_bit_exact_and_model(tmp_path, arch, group):
    """AutoAWQ's gemv layout: [out, in / 8] words, zero points and scales padded."""
    model, refs = write_awq(tmp_path, arch, group=group, version="gemv")
    assert_bit_exact(read_checkpoint(tmp_path), refs)
    assert_model_matches(tmp_path, model, refs)


def test_awq_other_layouts_and_non_quantized_refused(tmp_path):
    write_awq(tmp_path, "qwen2", version="gemv")
    config = json.loads((tmp_path / "config.json").read_text())
    config["quantization_config"]["group_size"] = 16
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"group_size for AWQ gemv is 16; expected 32, 64"):
        read_checkpoint(tmp_path)
    config["quantization_config"]["group_size"] = 64  # written with 32: 4 words of zeros
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"scales: dtype and shape is torch\.float16 "
                                              r"\[\d+, 32\]; expected torch\.float16 \[\d+, 16\]"):
        read_checkpoint(tmp_path)
    config["quantization_config"]["version"] = "gemv_fast"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="AWQ version is 'gemv_fast'"):
        read_checkpoint(tmp_path)
    del config["quantization_config"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="quant_method is None"):
        read_checkpoint(tmp_path)


def _rewrite_safetensors_header(path, edit):
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = edit(json.loads(raw[8:8 + n]))
    text = json.dumps(header).encode()  # data offsets count from the header's end
    path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + n:])


def test_safetensors_offsets_outside_the_file_are_refused_before_reading(tmp_path):
    write_awq(tmp_path, "llama-small")
    st = tmp_path / "model.safetensors"
    name = "model.layers.0.mlp.up_proj.qweight"

    def outside(h):
        h[name]["data_offsets"] = [h[name]["data_offsets"][0], 2 ** 40]
        return h

    _rewrite_safetensors_header(st, outside)
    with pytest.raises(CheckpointError, match=rf"tensor '{name}' data_offsets is .*1099511627776"
                                              r".*<= end <= \d+ \(the data's size\)"):
        read_checkpoint(tmp_path)
    st.write_bytes((2 ** 62).to_bytes(8, "little") + b"{}")
    with pytest.raises(CheckpointError, match="the header size is 4611686018427387904"):
        read_checkpoint(tmp_path)


def test_gguf_tensor_table_outside_the_file_is_refused(tmp_path):
    from executorch_tensorrt.quantization.checkpoints.gguf_file import GGUFFile

    path = tmp_path / "m.gguf"
    write_gguf(path, "llama-small", {"default": K.Q4_0})
    raw = bytearray(path.read_bytes())
    raw[8:16] = (2 ** 40).to_bytes(8, "little")  # the tensor count
    path.write_bytes(raw)
    with pytest.raises(CheckpointError, match=r"the tensor count is 1099511627776 .*expected at "
                                              r"most \d+"):
        read_checkpoint(path)
    write_gguf(path, "llama-small", {"default": K.Q4_0})
    first = min(GGUFFile(path).tensors.values(), key=lambda t: t.start)
    path.write_bytes(path.read_bytes()[:first.start + first.size - 1])  # truncated data
    with pytest.raises(CheckpointError, match="offset is .* inside the"):
        read_checkpoint(path)


def test_sharded_gptq_with_legacy_quantize_config(tmp_path):
    """Two shards and their index, the settings in AutoGPTQ's quantize_config.json."""
    from safetensors.torch import load_file, save_file

    model, ref32, _ = write_gptq(tmp_path, "qwen2", act_order=True)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    (tmp_path / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2],
              "model-00002-of-00002.safetensors": names[1::2]}
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(tmp_path / shard))
    index = {"weight_map": {k: shard for shard, keys in shards.items() for k in keys}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    config = json.loads((tmp_path / "config.json").read_text())
    legacy = config.pop("quantization_config")
    del legacy["quant_method"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "quantize_config.json").write_text(json.dumps(legacy))
    assert_bit_exact(read_checkpoint(tmp_path), ref32)
    assert_model_matches(tmp_path, model, ref32)
    index["weight_map"][names[0]] = "../elsewhere.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"names shard '\.\./elsewhere\.safetensors'"):
        read_checkpoint(tmp_path)


def test_gguf_table_agrees_with_ggufs_own_reader(tmp_path):
    """Our bounds-checked parser finds what gguf.GGUFReader finds: names, kinds,
    shapes, data offsets, and the metadata the config is made from."""
    import gguf

    from executorch_tensorrt.quantization.checkpoints.gguf_file import GGUFFile

    path = tmp_path / "m.gguf"
    write_gguf(path, "llama", {"default": K.Q4_K, "attn_v": K.Q6_K, "ffn_up": K.Q8_0},
               embed_kind=K.Q4_0)
    ours, theirs = GGUFFile(path), gguf.GGUFReader(path)
    assert [t.name for t in theirs.tensors] == list(ours.tensors)
    for t in theirs.tensors:
        info = ours.tensors[t.name]
        assert (info.kind, info.start, info.size) == (t.tensor_type, t.data_offset, t.n_bytes)
        assert list(info.dims) == [int(d) for d in t.shape]
    for key in ("general.architecture", "llama.block_count", "llama.attention.head_count_kv",
                "llama.attention.layer_norm_rms_epsilon"):
        assert ours.metadata[key] == theirs.fields[key].contents(), key


def test_gguf_metadata_disagreeing_with_the_tensors_is_refused_before_any_index(tmp_path):
    """The metadata's sizes give every tensor's shape (and llama's Q/K row order): a
    damaged size is refused against the other fields or the tensors, never
    allocated (found by the fuzzer)."""
    import struct

    path = tmp_path / "m.gguf"
    for key, pattern in [
            (b"llama.embedding_length", r"'llama\.rope\.dimension_count' is 32; expected "
                                        r"1073741824 \(the head size"),
            (b"llama.feed_forward_length", r"blk\.0\.ffn_\w+\.weight: shape is \[\d+, \d+\]; "
                                           r"expected \[\d+, \d+\] for model\.layers\.0\.mlp")]:
        write_gguf(path, "llama-small", {"default": K.Q4_0})
        raw = bytearray(path.read_bytes())
        at = raw.index(struct.pack("<Q", len(key)) + key + struct.pack("<I", 4)) + 8 + len(key) + 4
        raw[at:at + 4] = struct.pack("<I", 2 ** 31)
        path.write_bytes(raw)
        with pytest.raises(CheckpointError, match=pattern):
            read_checkpoint(path)


def test_gguf_architecture_refusals_name_the_tensor_or_field(tmp_path):
    """A tensor another architecture has, LongRoPE's factors, and an architecture
    without a name map are refused by name with the remedy."""
    path = tmp_path / "m.gguf"

    def rewrite(arch=None, extra=None):
        write_gguf(path, "phi3", {"default": K.Q4_0}, extra=extra, gguf_arch=arch)
        return path

    factors = np.ones(32, np.float32)
    with pytest.raises(CheckpointError, match=r"rope_factors_long\.weight: present is True.*"
                                              r"short-context variant"):
        read_checkpoint(rewrite(extra={"rope_factors_long.weight": factors}))
    with pytest.raises(CheckpointError, match=r"tensor name is 'blk\.0\.attn_q_norm\.weight'; "
                                              r"expected a phi3 tensor"):
        read_checkpoint(rewrite(extra={"blk.0.attn_q_norm.weight": factors[:16]}))
    with pytest.raises(CheckpointError, match=r"general\.architecture is 'falcon'; expected one "
                                              r"of \['gemma2', 'gemma3', 'llama', 'phi3', "
                                              r"'qwen2', 'qwen3'\]"):
        read_checkpoint(rewrite(arch="falcon"))


@pytest.mark.parametrize("arch, layers, scalar", [("gemma2", 46, 144), ("gemma2", 42, 256),
                                                  ("gemma3", 62, 168), ("gemma3", 34, 256)])
def test_gguf_gemma_config_takes_what_the_metadata_lacks_as_llama_cpp_does(arch, layers, scalar):
    """The 27B models' attention scale is hidden / heads, the others' the head size;
    Gemma 3's linear rope scaling reaches the global layers; other scalings are refused."""
    import transformers

    from executorch_tensorrt.quantization.checkpoints.gguf_arch import (ARCHITECTURES,
                                                                        transformers_config)

    hidden, heads = {144: 4608, 168: 5376, 256: 2560}[scalar], 32
    metadata = {"general.architecture": arch, f"{arch}.block_count": layers,
                f"{arch}.context_length": 8192, f"{arch}.embedding_length": hidden,
                f"{arch}.feed_forward_length": 4 * hidden, f"{arch}.attention.head_count": heads,
                f"{arch}.attention.head_count_kv": 16, f"{arch}.attention.key_length": 256 if (
                    scalar == 256) else 128, f"{arch}.attention.layer_norm_rms_epsilon": 1e-6,
                f"{arch}.attention.sliding_window": 4096, f"{arch}.rope.scaling.type": "linear",
                f"{arch}.rope.scaling.factor": 8.0}
    if arch == "gemma2":
        del metadata[f"{arch}.rope.scaling.type"]
    config = transformers_config(metadata, ARCHITECTURES[arch], 256, True, "m.gguf")
    assert config["query_pre_attn_scalar"] == scalar and config["sliding_window"] == 4096
    built = transformers.AutoConfig.for_model(config.pop("model_type"), **config)
    if arch == "gemma3":
        assert built.rope_parameters["full_attention"]["factor"] == 8.0
        assert built.rope_parameters["sliding_attention"]["rope_theta"] == 10000.0
        metadata[f"{arch}.rope.scaling.type"] = "yarn"
        with pytest.raises(CheckpointError, match=r"'gemma3\.rope\.scaling\.type' is 'yarn'"):
            transformers_config(metadata, ARCHITECTURES[arch], 256, True, "m.gguf")
