"""Whisper through optimum-executorch's `main_export(...,
task="automatic-speech-recognition", recipe="tensorrt")`: optimum's own
`ExecuTorchModelForSpeechSeq2Seq` loads the program it wrote (model.pte alone)
and generates eager transformers' greedy tokens from a random log-mel input;
every node of both methods is on TensorRT. optimum-executorch lives in
build/optimum-site, so the export and the run happen in a child interpreter
with it on the path (test_optimum_recipe.py)."""
from __future__ import annotations

import json

import pytest
import torch
import transformers

from encoder_decoder_checks import assert_projected_once, cross_states, decoder_blob
from runner_helpers import write_char_tokenizer
from test_optimum_recipe import _child

N_MELS, CHUNK_SECONDS = 8, 1  # 100 frames: max_source_positions 50
START, EOS = 94, 95            # runner_helpers' <s>, </s>
CACHE = 24


def _config() -> transformers.WhisperConfig:
    return transformers.WhisperConfig(
        vocab_size=96, num_mel_bins=N_MELS, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_source_positions=50, max_target_positions=64,
        decoder_start_token_id=START, bos_token_id=START, eos_token_id=EOS, pad_token_id=EOS,
        init_std=0.5)  # Whisper's 0.02 gives one repeated token here


RUN = """
import json, sys, torch
import executorch_tensorrt
from optimum.exporters.executorch import main_export
from optimum.executorch import ExecuTorchModelForSpeechSeq2Seq
from transformers import AutoProcessor
model_dir, out = sys.argv[1:3]
progs = main_export(model_dir, task="automatic-speech-recognition", recipe="tensorrt",
                    output_dir=out, local_files_only=True, max_seq_len=%d,
                    recipe_kwargs={"progress": None})
result = progs["model"].result
model = ExecuTorchModelForSpeechSeq2Seq.from_pretrained(out)
torch.manual_seed(1)
features = torch.randn(1, %d, 100)
tokens = model.generate(features)
text = model.transcribe(AutoProcessor.from_pretrained(model_dir).tokenizer, features)
# Position 1 after position 0 reads the kept cross-attention keys/values: the
# encoder output passed again (here zeros instead) changes nothing.
hidden = model.model.run_method("encoder", (features,))[0]
def second_step(again):
    for position, states in ((0, hidden), (1, again)):
        logits = model.model.run_method("text_decoder", (
            torch.tensor([[%d]]), states, torch.tensor([position])))[0]
    return logits
ignored = float((second_step(hidden) - second_step(torch.zeros_like(hidden))).abs().max())
# Nothing kept (after reset_state): a first call at position 3 projects the
# encoder output it is given, as the eager step module does.
from transformers import WhisperForConditionalGeneration
from executorch_tensorrt.llm.speech import WhisperDecoderStep
executorch_tensorrt.reset_state("text_decoder")
args = (torch.tensor([[%d]]), hidden, torch.tensor([3]))
late = model.model.run_method("text_decoder", args)[0]
with torch.no_grad():
    eager = WhisperDecoderStep(WhisperForConditionalGeneration.from_pretrained(model_dir).eval(),
                               %d).eval()(*args)
late = float((late - eager).abs().max())
import os
print(json.dumps({"tokens": tokens, "text": text, "files": sorted(os.listdir(out)),
                  "seconds": result.export.seconds,
                  "on_trt": {m: [len(p) for p in r.partitions] for m, r in
                             result.export.reports.items()},
                  "nodes_on_trt": {m: len(r.nodes_on_tensorrt) for m, r in
                                   result.export.reports.items()},
                  "rejected": {m: sorted(r.rejected) for m, r in result.export.reports.items()},
                  "state": {m: r.state for m, r in result.export.reports.items()},
                  "ignored": ignored, "late": late}))
""" % (CACHE, N_MELS, START, START, CACHE)


def _eager_greedy(model, features, n: int) -> list[int]:
    """Greedy tokens of the transformers model itself (no cache), stopping
    at EOS as optimum's class does; the start token is not returned."""
    ids = [START]
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_features=features, decoder_input_ids=torch.tensor([ids]),
                           use_cache=False).logits
            ids.append(int(logits[0, -1].argmax()))
            if ids[-1] == EOS:
                break
    return ids[1:]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whisper")
    torch.manual_seed(0)
    model = transformers.WhisperForConditionalGeneration(_config()).eval()
    model.save_pretrained(folder / "model")
    # optimum's loader opens the model's processor: a local one, nothing downloaded.
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(write_char_tokenizer(folder)), bos_token="<s>", eos_token="</s>")
    transformers.WhisperProcessor(
        feature_extractor=transformers.WhisperFeatureExtractor(
            feature_size=N_MELS, chunk_length=CHUNK_SECONDS),
        tokenizer=tokenizer).save_pretrained(folder / "model")
    done = _child(RUN, str(folder / "model"), str(folder / "out"),
                  env={"EXECUTORCH_TENSORRT_FALLBACK": "onnxruntime"})
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    report["pte"] = str(folder / "out" / "model.pte")
    return model, report


def test_optimums_speech_class_generates_eagers_greedy_tokens(exported):
    model, report = exported
    torch.manual_seed(1)
    features = torch.randn(1, N_MELS, 100)
    want = _eager_greedy(model, features, CACHE - 1)
    assert report["tokens"] == want and len(set(want)) > 2, (report["tokens"], want)
    assert report["text"] and isinstance(report["text"], str)
    # optimum's class loads model.pte alone: the weights are in it.
    assert report["files"] == ["model.pte", "model.report.json"]


def test_encoder_and_decoder_are_each_one_tensorrt_partition(exported):
    report = exported[1]
    assert report["rejected"] == {"encoder": [], "text_decoder": []}, report["rejected"]
    assert sorted(report["on_trt"]) == ["encoder", "text_decoder"]
    assert all(len(sizes) == 1 for sizes in report["on_trt"].values()), report["on_trt"]


def test_the_decoders_self_attention_cache_is_owned_by_tensorrt(exported):
    state = exported[1]["state"]
    assert state["encoder"] == {}
    caches = {k: v for k, v in state["text_decoder"].items() if "_cache_" in k}
    assert len(caches) == 2 * 2, state  # keys and values of 2 decoder layers
    assert all(v.startswith("owned by TensorRT") for v in caches.values()), state


def test_cross_attention_is_projected_at_position_0_only(exported):
    """The cross-attention keys/values are partition-owned state, and the
    projections of encoder_hidden_states sit in the then-branch of one If on
    position 0: later steps read the kept values (their output ignores the
    encoder output passed again). With nothing kept (after reset_state), a
    first call at a later position projects what it is given, as eager does."""
    report = exported[1]
    cross = {k: v for k, v in report["state"]["text_decoder"].items() if k.startswith("cross_")}
    assert sorted(cross) == ["cross_attention_kept", "cross_key_0", "cross_key_1",
                             "cross_value_0", "cross_value_1"]
    assert all(v.startswith("owned by TensorRT") for v in cross.values()), cross
    decoder = decoder_blob(report["pte"])
    assert cross_states(decoder) == {k: [1, 4, 50, 8] for k in cross if k[-1].isdigit()}
    assert_projected_once(decoder)
    assert report["ignored"] == 0.0, report["ignored"]
    assert report["late"] < 1e-4, report["late"]



def test_kept_cross_attention_is_updated_in_place(exported, allow_fallback, capfd):
    """The kept keys/values are "in_place" states: one buffer each, bound as
    the engine's input and output, written by TensorScatter at position 0 and
    by an empty update afterwards. A later step leaves the buffer where it is
    and as it was, the executor copies none of it, and onnxruntime's
    TensorScatter updates it in place (it says when it has to copy instead)."""
    from executorch.runtime import Runtime

    from executorch_tensorrt.runtime import callbacks
    from executorch_tensorrt.runtime import state as rt_state
    from helpers import new_state

    pte = exported[1]["pte"]
    kinds = {e["fqn"]: e.get("update") for e in decoder_blob(pte).state}
    cross = [k for k in kinds if k.startswith(("cross_key_", "cross_value_"))]
    assert len(cross) == 4 and {kinds[k] for k in cross} == {"in_place"}, kinds
    program = Runtime.get().load_program(pte)
    before = rt_state.live_states("text_decoder")
    decoder = program.load_method("text_decoder")
    st = new_state(before, "text_decoder")
    [executor] = [e for e in callbacks.install().handles.values()
                  if getattr(e, "state", None) is st]
    index = {s.fqn: k for k, s in enumerate(st.specs)}
    torch.manual_seed(1)
    hidden = program.load_method("encoder").execute([torch.randn(1, N_MELS, 100)])[0]
    assert all(st.spares[index[k]] is None for k in cross)  # no second buffer
    addresses = [st.buffers[index[k]].ctypes.data for k in cross]
    capfd.readouterr()
    decoder.execute([torch.tensor([[START]]), hidden, torch.tensor([0])])
    kept = {k: st.value(k) for k in cross}
    assert all(float(abs(v).sum()) > 0 for v in kept.values())
    copied = executor.copied_bytes
    for position in (1, 2):  # the encoder output passed again is ignored
        decoder.execute([torch.tensor([[START]]), torch.zeros_like(hidden),
                         torch.tensor([position])])
    assert executor.copied_bytes - copied < min(v.nbytes for v in kept.values())
    assert [st.buffers[index[k]].ctypes.data for k in cross] == addresses
    assert all(torch.equal(torch.from_numpy(st.value(k)), torch.from_numpy(v))
               for k, v in kept.items())
    assert "in-place optimization not activated" not in capfd.readouterr().err
