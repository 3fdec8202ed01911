import json, os, sys
import torch
from torch.export import export
from executorch.exir import to_edge_transform_and_lower, ExecutorchBackendConfig
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from toy_backend import SEEN, AllPartitioner  # the toy backend and partitioner this probe uses
class Toy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(8, 8); self.l2 = torch.nn.Linear(8, 8)
        self.register_buffer("k", torch.zeros(1, 4, 8))
    def forward(self, x, input_pos):  # x [1,S,8], input_pos [S]
        h = self.l1(x)
        self.k.index_copy_(1, input_pos, h)
        return self.l2(self.k.sum(1))

m = Toy().eval()
progs = {"prefill": export(m, (torch.randn(1, 2, 8), torch.tensor([0, 1]))),
         "decode": export(m, (torch.randn(1, 1, 8), torch.tensor([2])))}
print("exported sig (decode):", progs["decode"].graph_signature); print(progs["decode"].graph_module.code)
edge = to_edge_transform_and_lower(progs, partitioner=[AllPartitioner()])
for name in ["prefill", "decode"]:
    ep = edge.exported_program(name)
    print(f"== {name} top-level graph after lowering"); print(ep.graph_module.code)
    print("top-level sig inputs:", [(s.kind.name, s.arg.name, s.target) for s in ep.graph_signature.input_specs])
    print("top-level sig outputs:", [(s.kind.name, s.arg.name, s.target) for s in ep.graph_signature.output_specs])
    lm = ep.graph_module.lowered_module_0
    osig = lm.original_module.graph_signature
    print("lowered inputs:", [(s.kind.name, s.arg.name, s.target) for s in osig.input_specs])
    print("lowered outputs:", [(s.kind.name, s.arg.name, s.target) for s in osig.output_specs])
for i, s in enumerate(SEEN): print("preprocess", i, json.dumps(s))
et = edge.to_executorch(ExecutorchBackendConfig())
for name in ["prefill", "decode"]:
    plan = [p for p in et.executorch_program.execution_plan if p.name == name][0]
    print(name, "operators outside delegates:", [o.name for o in plan.operators],
          "delegates:", [d.id for d in plan.delegates], "inputs", plan.inputs, "outputs", plan.outputs)
    print(" mutable-buffer related values:", len(plan.values))
os.makedirs("/tmp/etrt-experiments/out", exist_ok=True)
with open("/tmp/etrt-experiments/out/toy.pte", "wb") as f: et.write_to_file(f)
et.write_tensor_data_to_file("/tmp/etrt-experiments/out")
print(os.listdir("/tmp/etrt-experiments/out"), {f: os.path.getsize("/tmp/etrt-experiments/out/"+f) for f in os.listdir("/tmp/etrt-experiments/out")})
nd = edge._named_data_store.get_named_data_store_output()
print("named data buffers:", len(nd.buffers), "pte keys", list(nd.pte_data), "external", {k: list(v) for k, v in nd.external_data.items()})
from executorch.runtime import Runtime
rt = Runtime.get()
p = rt.load_program("/tmp/etrt-experiments/out/toy.pte", data_path="/tmp/etrt-experiments/out/toy_weights.ptd")
print("program loaded with data_path; methods:", p.method_names)
try:
    p.load_method("decode")
except Exception as e: print("load_method (no ToyBackend registered):", type(e).__name__, str(e)[:200])
