"""Models quantized by other tools, turned into our formats' modules and
checked: torchao weights (`torchao.py`), NVIDIA ModelOpt quantizers
(`modelopt.py`), PT2E: our `TensorRTQuantizer` (`pt2e.py`) and any
`convert_pt2e` graph (`qdq_graph.py`)."""
