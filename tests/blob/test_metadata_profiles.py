""""optimization_profiles": every optimization profile of an engine, beside
"profiles" (profile 0, what single-profile readers use). read_blob and
write_blob refuse a wrong value with a BlobError naming the field; blobs with
one profile, and Torch-TensorRT's (no profiles at all), keep loading."""
from __future__ import annotations

import pytest
from blob_cases import BlobError, binding, blob, meta_blob
from upstream_blobs import torch_tensorrt_style_blob

BINDINGS = [binding("x", shape=[-1, 3]), binding("w", shape=[2]),
            binding("n", shape=[-1]), binding("y", shape=[-1, 3], is_input=False)]


def profile(lo: int, hi: int, n=(1, 4)) -> list[dict]:
    return [{"name": "x", "min": [lo, 3], "opt": [hi, 3], "max": [hi, 3]},
            {"name": "n", "min": [n[0]], "opt": [n[1]], "max": [n[1]]}]


SETS = [profile(1, 16), profile(17, 256), profile(257, 2048)]


def meta(sets=SETS, **fields) -> dict:
    out = {"io_bindings": BINDINGS, "profiles": sets[0] if sets else [],
           "optimization_profiles": sets}
    out.update(fields)
    return {k: v for k, v in out.items() if v is not None}


def test_several_profiles_round_trip():
    for m in (meta(), meta([profile(1, 2048)]), meta(SETS[:2] + [profile(1, 2048, (1, 9))])):
        assert blob.read_blob(blob.write_blob(b"E", m)).metadata == m
        assert blob.read_blob(meta_blob(m)).metadata == m


def test_blobs_with_one_profile_or_none_keep_loading():
    one = {"io_bindings": BINDINGS, "profiles": SETS[0]}
    assert blob.read_blob(blob.write_blob(b"E", one)).metadata == one
    upstream = blob.read_blob(torch_tensorrt_style_blob())
    assert "optimization_profiles" not in upstream.metadata


# (id, metadata, words the message must contain)
BAD = [
    ("not_array", meta(optimization_profiles={"0": SETS[0]}),
     ["'optimization_profiles'", "array of 1 to 16"]),
    ("empty", meta(optimization_profiles=[]), ["array of 1 to 16"]),
    ("too_many", meta([profile(k + 1, k + 1) for k in range(16)] + [profile(17, 2048)]),
     ["array of 1 to 16"]),
    ("without_profiles", meta(profiles=None), ["'profiles' (profile 0) is not"]),
    ("first_is_not_profiles", meta(profiles=SETS[1]), ["optimization_profiles[0] differs"]),
    ("entry_not_array", meta(SETS[:1] + [{"x": 1}]), ["optimization_profiles[1]", "array"]),
    ("unknown_input", meta(SETS[:2] + [[{**SETS[2][0], "name": "z"}, SETS[2][1]]]),
     ["optimization_profiles[2]", "names no input"]),
    ("names_an_output", meta(SETS[:2] + [[{**SETS[2][0], "name": "y"}, SETS[2][1]]]),
     ["optimization_profiles[2]", "names no input"]),
    ("missing_input", meta(SETS[:2] + [SETS[2][:1]]),
     ["optimization_profiles[2] names inputs ['x']", "every profile gives every"]),
    ("wrong_rank", meta(SETS[:2] + [[{**SETS[2][0], "max": [2048]}, SETS[2][1]]]),
     ["optimization_profiles[2]", "rank"]),
    ("unordered", meta(SETS[:2] + [[{**SETS[2][0], "opt": [4096, 3]}, SETS[2][1]]]),
     ["optimization_profiles[2]", "min <= opt <= max"]),
    ("static_dim_moves", meta(SETS[:2] + [[{**SETS[2][0], "max": [2048, 4]}, SETS[2][1]]]),
     ["optimization_profiles[2]", "static"]),
    ("gap", meta([SETS[0], SETS[2]]),
     ["input 'x' dimension 0 sizes 17..256 in no profile"]),
]


@pytest.mark.parametrize("m, words", [pytest.param(m, w, id=i) for i, m, w in BAD])
def test_bad_optimization_profiles_are_refused(m, words):
    with pytest.raises(BlobError) as info:
        blob.read_blob(meta_blob(m))
    for w in words:
        assert w in str(info.value), (w, str(info.value))
    with pytest.raises(BlobError):  # and the writer never writes one
        blob.write_blob(b"E", m)
