"""`executorch-tensorrt inspect`: what a .pte holds (I/O, delegates, operators,
named data, caches), what its first load will do, its partition report."""
from __future__ import annotations

from ..exits import EXIT_MISMATCH, EXIT_OK, EXIT_USAGE, Fail
from .common import add_command, add_data_argument, add_target_arguments, data_path


def register(sub) -> None:
    p = add_command(sub, "inspect",
                    help="describe a .pte: I/O, delegates, operators, blobs")
    p.add_argument("model")
    p.add_argument("--device-resident", action="store_true",
                   help="exit 1 unless every method input and output is recorded as a CUDA "
                        "tensor and no et_copy (host<->device copy) op is left")
    p.add_argument("--report", action="store_true",
                   help="also print the partition report export wrote (model.report.json): "
                        "per ATen op, nodes on TensorRT and elsewhere, and why")
    add_target_arguments(p, "to say whether the first load on it builds")
    add_data_argument(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..runner import check_program_file

    path = check_program_file(args.model)  # before loading torch: a wrong file answers fast
    data = data_path(path, args.data)
    from ...program import named_data as ndi
    from ...program.info import describe_program, device_resident_problems, format_program, read_pte

    pte = read_pte(path)
    methods = describe_program(pte.program, str(path))
    print(format_program(methods))
    from ...program.cache_report import cache_report, format_cache_report

    caches = cache_report(methods)
    if caches.caches:
        print(format_cache_report(caches))
    if any(d.backend == "TensorRTBackend" and d.meta is not None
           for m in methods for d in m.delegates):
        from ...program.memory_report import format_memory_report, memory_report

        print(format_memory_report(memory_report(methods)))
    try:
        in_ptd = ndi.read_ptd_index(data) if data is not None else {}
    except ndi.DataFileError as e:
        raise Fail(EXIT_USAGE, str(e)) from None
    ptd_name = data.name if data is not None else None
    print(ndi.format_named_data(ndi.collect(methods, ndi.pte_named_data(pte), in_ptd, ptd_name),
                                ptd_name))
    if any(d.backend == "TensorRTBackend" and d.meta is not None
           for m in methods for d in m.delegates):
        from ...deploy.prepare import first_load, format_first_load

        try:
            print(format_first_load(first_load(path, cache=args.cache, capability=args.target)))
        except ValueError as e:  # a --target not of the form SM89
            raise Fail(EXIT_USAGE, str(e)) from None
    if args.report:
        from ...aot.partition.report import format_report, read_report

        try:
            report = read_report(path)
        except (OSError, ValueError) as e:
            raise Fail(EXIT_USAGE, f"no partition report: {e}") from None
        print("\n" + format_report(report))
    if not args.device_resident:
        return EXIT_OK
    problems = device_resident_problems(methods)
    for problem in problems:
        print(f"device-resident: FAIL: {problem}")
    if problems:
        return EXIT_MISMATCH
    print("device-resident: OK (no et_copy ops; every method input and output is a CUDA tensor)")
    return EXIT_OK
