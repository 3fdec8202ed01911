"""Engines before the first call: `prepare` builds (real TensorRT-RTX builds on
the CPU) what the first load would build, into the cache the executor's own
lookup (`engine_at_load`) reads; `first_load` (inspect) says what a load will
do; a prepared entry for another program, GPU or TensorRT is refused with the
reason and rebuilt, never used. Executing the engine needs a GPU: not here."""
from __future__ import annotations

import dataclasses
import json
import shutil
import stat

import pytest

from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.deploy.prepare import first_load, prepare, program_named_data
from executorch_tensorrt.errors import EngineUnavailable
from executorch_tensorrt.program.info import read_pte
from executorch_tensorrt.runtime.cuda.probe import cuda_unavailable_reason
from executorch_tensorrt.runtime.named_data import blob_weights
from executorch_tensorrt.runtime.tensorrt.engine_cache import EngineCache, EntryFacts
from executorch_tensorrt.runtime.tensorrt.portability import (
    CACHE_ENV, cache_key, embedded_onnx, engine_at_load, program_key)
from executorch_tensorrt.tensorrt.flavor import load_tensorrt
from helpers import tensorrt_blobs

TARGET = "SM89"


@pytest.fixture(scope="module")
def prepared(exported, tmp_path_factory):
    """The cnn example exported without a GPU (engine none, weights in a
    .ptd), prepared for SM89 into a fresh cache: (pte, ptd, cache, report)."""
    _, _, pte = exported("cnn", external_weights=True)
    cache = tmp_path_factory.mktemp("prepared") / "cache"
    before = first_load(pte, cache=cache, capability=TARGET)
    report = prepare(pte, pte.with_suffix(".ptd"), cache=cache, capability=TARGET,
                     progress=None)
    return pte, pte.with_suffix(".ptd"), cache, before, report


def only_blob(pte):
    (data,) = tensorrt_blobs(pte)
    return read_blob(data)


def lookup(pte, ptd, blob, cache, monkeypatch):
    """The executor's load-time lookup for a GPU of TARGET (executor.py calls it
    with its device's capability), with the program's own named data."""
    monkeypatch.setenv(CACHE_ENV, str(cache))
    named = program_named_data(read_pte(pte), ptd)
    return engine_at_load(blob, load_tensorrt(), TARGET, lambda: blob_weights(blob, named))


def entry_of(pte, cache) -> tuple[str, EntryFacts]:
    blob, trt = only_blob(pte), load_tensorrt()
    program, _ = program_key(blob, embedded_onnx(blob),
                             [(w.name, w.key, w.nbytes) for w in blob.meta.weights])
    return cache_key(program, trt, TARGET), EntryFacts(program, TARGET, trt.flavor, trt.version)


def test_prepare_builds_the_missing_engine_and_records_its_build_time(prepared):
    pte, _, cache, before, report = prepared
    assert only_blob(pte).engine_kind == "none"
    assert [(p.method, p.builds) for p in before] == [("forward", True)]
    assert "ships no engine" in before[0].reason and "none prepared" in before[0].reason
    (done,) = report
    assert done.source == "built" and done.capability == TARGET
    assert done.build_seconds is not None and 0 < done.build_seconds <= done.seconds
    (entry,) = cache.glob("*.engine")
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    after = first_load(pte, cache=cache, capability=TARGET)
    assert [(p.builds, p.build_seconds) for p in after] == [(False, done.build_seconds)]
    assert "a prepared engine for SM89" in after[0].reason


def test_the_load_lookup_finds_the_prepared_engine_and_builds_nothing(prepared, monkeypatch):
    pte, ptd, cache, _, _ = prepared
    key, facts = entry_of(pte, cache)
    stored = EngineCache(cache).peek(key, facts)[0]
    loaded = lookup(pte, ptd, only_blob(pte), cache, monkeypatch)
    assert loaded.source == "cache" and loaded.rejected is None
    assert loaded.engine == stored.engine and loaded.engine[:4] != b"\0\0\0\0"
    again = prepare(pte, ptd, cache=cache, capability=TARGET, progress=None)
    assert [p.source for p in again] == ["cache"]


@pytest.mark.parametrize("field, value, reason", [
    ("program", "0" * 64, "program digest"),
    ("capability", "SM86", "GPU capability SM86"),
    ("trt_version", "1.6.0.1", "TensorRT version 1.6.0.1"),
    ("trt_flavor", "tensorrt", "TensorRT flavour tensorrt"),
])
def test_a_prepared_engine_for_something_else_is_refused_and_rebuilt(
        prepared, tmp_path, monkeypatch, capfd, field, value, reason):
    pte, ptd, cache, _, _ = prepared
    planted_cache = tmp_path / "cache"
    shutil.copytree(cache, planted_cache)
    key, facts = entry_of(pte, cache)
    entry = planted_cache / f"{key}.engine"
    planted = b"an engine for another program, GPU or TensorRT"
    # A well-formed entry under the right name (one copied in from elsewhere).
    entry.write_bytes(EngineCache._encode(key, planted, dataclasses.replace(facts,
                                                                             **{field: value})))
    entry.chmod(0o600)
    (said,) = first_load(pte, cache=planted_cache, capability=TARGET)
    assert said.builds and reason in said.reason
    loaded = lookup(pte, ptd, only_blob(pte), planted_cache, monkeypatch)
    assert loaded.source == "built" and loaded.engine != planted
    assert reason in loaded.rejected and "rebuilding it" in loaded.rejected
    assert reason in capfd.readouterr().err
    repaired, refused = EngineCache(planted_cache).peek(key, facts)
    assert refused is None and repaired.engine == loaded.engine


def test_without_a_gpu_prepare_asks_for_the_target(prepared, tmp_path):
    if cuda_unavailable_reason() is None:
        pytest.skip("a GPU is present: prepare builds for it")
    pte, ptd, _, _, _ = prepared
    with pytest.raises(EngineUnavailable, match=r"--target SM89"):
        prepare(pte, ptd, cache=tmp_path, progress=None)
    (said,) = first_load(pte, cache=tmp_path)
    assert said.builds and "no target given" in said.reason


def test_a_full_engine_shipped_for_the_target_builds_nothing(exported, tmp_path):
    _, _, pte = exported("add", inline_weights=True)  # built at export, on the CPU
    blob = only_blob(pte)
    assert blob.engine_kind == "full" and blob.meta.build.build_seconds > 0
    (said,) = first_load(pte, cache=tmp_path, capability=TARGET)
    assert not said.builds and said.build_seconds == blob.meta.build.build_seconds
    (done,) = prepare(pte, cache=tmp_path, capability=TARGET, progress=None)
    assert done.source == "blob" and not list(tmp_path.glob("*.engine"))
    json_form = blob.meta.to_json()
    assert json.loads(json.dumps(json_form))["build_seconds"] == blob.meta.build.build_seconds


def test_prepare_builds_a_bert_whose_equal_weights_differ_in_type(tmp_path):
    """transformers' BertModel (tiny config, random weights) exported without a
    GPU: its float32 [512] intermediate bias of zeros and its int64 [1, 256]
    token-type buffer of zeros have equal bytes, so named data stores them
    once; TensorRT refused the one address used with two element counts
    ("Weights of same values but of different counts") until the parser
    gave the second its own copy (onnx_parser._distinct_addresses)."""
    import torch
    import transformers

    import executorch_tensorrt

    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=512, vocab_size=100,
                                  max_position_embeddings=256)
    inputs = (torch.randint(0, cfg.vocab_size, (1, 8), dtype=torch.int64),)
    pte = executorch_tensorrt.export(transformers.BertModel(cfg).eval(), inputs,
                                     tmp_path / "bert.pte", progress=None,
                                     external_weights=True)
    blob = only_blob(pte)
    assert blob.engine_kind == "none"
    named = program_named_data(read_pte(pte), pte.with_suffix(".ptd"))
    weights = blob_weights(blob, named)
    by_address: dict = {}
    for w in weights:
        by_address.setdefault(w.address, []).append(w.nbytes)
    assert any(len(sizes) > 1 for sizes in by_address.values()), \
        "the export no longer stores two initializers once: the test checks nothing"
    (done,) = prepare(pte, pte.with_suffix(".ptd"), cache=tmp_path / "cache",
                      capability=TARGET, progress=None)
    assert done.source == "built" and done.build_seconds is not None
    assert len(list((tmp_path / "cache").glob("*.engine"))) == 1
