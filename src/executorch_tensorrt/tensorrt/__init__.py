"""What both the AOT side and the runtime need from TensorRT: the flavour
import, its logger, and engine builds from an ONNX graph and plain options.
Never imports executorch.exir."""
