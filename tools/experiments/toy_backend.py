import torch, json, hashlib, os, sys
from torch.export import export
from executorch.exir import to_edge_transform_and_lower, EdgeCompileConfig, ExecutorchBackendConfig
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.partitioner import Partitioner, PartitionResult, DelegationSpec
from executorch.exir.backend.utils import tag_mutated_buffer, tag_constant_data
from executorch.exir._serialize._named_data_store import NamedDataStore

SEEN = []
class ToyBackend(BackendDetails):
    @staticmethod
    def preprocess(ep, compile_specs):
        sig = ep.graph_signature
        info = {"inputs": [(s.kind.name, s.arg.name, s.target) for s in sig.input_specs],
                "outputs": [(s.kind.name, s.arg.name, s.target) for s in sig.output_specs],
                "buffers_to_mutate": dict(sig.buffers_to_mutate),
                "state_dict": list(ep.state_dict.keys()), "constants": list(ep.constants.keys()),
                "ops": [str(n.target) for n in ep.graph.nodes if n.op == "call_function"],
                "placeholders": [n.name for n in ep.graph.nodes if n.op == "placeholder"]}
        SEEN.append(info)
        nds = NamedDataStore()
        for name, t in list(ep.state_dict.items()) + list(ep.constants.items()):
            # key by content hash so methods/partitions sharing a weight share one entry
            nds.add_named_data(hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()[:16] + "_" + name,
                               t.detach().contiguous(), alignment=64, external_tag="toy_weights")
        return PreprocessResult(processed_bytes=json.dumps(info).encode(), debug_handle_map={},
                                data_store_output=nds.get_named_data_store_output())

class AllPartitioner(Partitioner):
    def __init__(self): self.delegation_spec = DelegationSpec("ToyBackend", [])
    def partition(self, ep):
        for n in ep.graph.nodes:
            if n.op == "call_function": n.meta["delegation_tag"] = "tag0"
        tag_constant_data(ep)
        tag_mutated_buffer(ep)
        return PartitionResult(tagged_exported_program=ep, partition_tags={"tag0": self.delegation_spec})

