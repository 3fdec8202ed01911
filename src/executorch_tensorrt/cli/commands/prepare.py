"""`executorch-tensorrt prepare`: a program's missing engines built for this
GPU into the engine cache, before its first load (deploy/prepare.py)."""
from __future__ import annotations

from ..exits import EXIT_OK, EXIT_RUN, EXIT_USAGE, Fail
from .common import add_command, add_data_argument, add_target_arguments, data_path


def register(sub) -> None:
    p = add_command(
        sub, "prepare",
        help="build a program's missing engines for this GPU before its first load",
        description="Builds every engine the first load of MODEL would build (a program "
                    "exported without a GPU ships none; an engine for other GPUs or another "
                    "TensorRT is rebuilt) and stores it in the engine cache that load reads, "
                    "so the load builds nothing. With --cache DIR, load with "
                    "EXECUTORCH_TENSORRT_CACHE_DIR=DIR. inspect --target says what is "
                    "prepared. See docs/gpu-runtime.md (engines before the first call).")
    p.add_argument("model")
    add_target_arguments(p, "to build for")
    add_data_argument(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..runner import check_program_file

    path = check_program_file(args.model)
    data = data_path(path, args.data)
    from ...deploy.prepare import prepare
    from ...errors import EngineUnavailable

    try:
        done = prepare(path, data, cache=args.cache, capability=args.target)
    except ValueError as e:  # not a program, a damaged .ptd, or a --target not like SM89
        raise Fail(EXIT_USAGE, str(e)) from None
    except EngineUnavailable as e:
        raise Fail(EXIT_RUN, str(e)) from None
    built = [p for p in done if p.source == "built"]
    print(f"prepared {path.name}: {len(done)} TensorRT partitions, {len(built)} built, "
          f"{sum(p.source == 'cache' for p in done)} already prepared, "
          f"{sum(p.source == 'blob' for p in done)} ship their engine"
          + (f"; build time {sum(p.build_seconds or 0 for p in built):.2f} s" if built else ""))
    if args.cache:
        print(f"load with EXECUTORCH_TENSORRT_CACHE_DIR={args.cache} so the load finds them")
    return EXIT_OK
