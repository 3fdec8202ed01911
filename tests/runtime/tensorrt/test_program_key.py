"""The program digest a prepared engine is filed under (portability.program_key)
is computed from the typed profiles without forming the whole metadata JSON
(the load's lookup is cheaper so); it must stay the digest of the JSON form the
blob records, or every engine prepared before would be missed and rebuilt."""
from __future__ import annotations

import hashlib
import json

from executorch_tensorrt.blob import read_blob, write_blob
from executorch_tensorrt.runtime.tensorrt.portability import program_key

ONNX = b"an ONNX model's bytes"
WEIGHTS = [("w", "etrt." + "ab" * 32, 8)]


def _binding(name, shape, is_input=True):
    return {"name": name, "dtype": "float32", "shape": shape, "is_input": is_input}


def _profile(lo, hi):
    # "note": a key this reader does not know, carried as is (it is in the JSON form)
    return [{"max": [hi, 3], "name": "x", "min": [lo, 3], "opt": [hi, 3], "note": lo}]


def _blob(sets):
    meta = {"io_bindings": [_binding("x", [-1, 3]), _binding("y", [-1, 3], False)],
            "profiles": sets[0], "optimization_profiles": sets, "precision": "fp16"}
    if len(sets) == 1:
        del meta["optimization_profiles"]
    return read_blob(write_blob(b"E", meta))


def _from_json_form(blob) -> str:
    """The digest as the entries were filed: from BlobMetadata.to_json()."""
    form = blob.meta.to_json()
    key_data = json.dumps([form.get("profiles"), blob.meta.build.precision,
                           json.dumps([list(w) for w in WEIGHTS])]
                          + ([form["optimization_profiles"]]
                             if "optimization_profiles" in form else []),
                          sort_keys=True).encode()
    return hashlib.sha256(ONNX + key_data).hexdigest()


def test_the_program_digest_is_the_one_entries_were_filed_under():
    several = _blob([_profile(1, 16), _profile(17, 256)])
    one = _blob([_profile(1, 16)])
    for blob in (several, one):
        assert program_key(blob, ONNX, WEIGHTS)[0] == _from_json_form(blob)
    # and it still tells programs apart: another profile set is another program
    other = _blob([_profile(1, 16), _profile(17, 512)])
    assert program_key(other, ONNX, WEIGHTS)[0] != program_key(several, ONNX, WEIGHTS)[0]
