"""`eqxrl export RUN_DIR --format stablehlo|onnx`: a run directory's policy as a file that runs
without eqxrl (serialised StableHLO for JAX, ONNX for onnxruntime), with a JSON description beside it."""

import argparse
from typing import Any

from ..core import one_line
from ..runs import EXPORT_FORMATS, export_run
from ._common import add_run_dir_command
from ._evaluate import add_checkpoint_flag, chosen_checkpoint
from ._flags import add_trust_flag
from ._parse import parse_int, positive


def add_export_command(commands: Any) -> None:
    """Add `eqxrl export RUN_DIR` to `commands`."""
    ex = add_run_dir_command(
        commands,
        "export",
        help="export the policy of a run directory (StableHLO or ONNX)",
        description="Write the policy of a run directory as serialised StableHLO (runs with JAX, without eqxrl) "
        "or ONNX (runs with onnxruntime, without JAX), and a JSON file beside it describing its inputs, "
        "outputs, spaces and preprocessing.",
    )
    ex.add_argument("--format", choices=EXPORT_FORMATS, default="stablehlo", help="the file format (default: stablehlo)")
    ex.add_argument(
        "--out", default=None, metavar="FILE",
        help="where to write it (default: RUN_DIR/policy.stablehlo or RUN_DIR/policy.onnx; policy-sample.* with --sample)",
    )  # fmt: skip
    add_checkpoint_flag(ex, "export")
    ex.add_argument("--member", type=parse_int, default=0, metavar="I", help="which seed of the run (default: 0)")
    ex.add_argument(
        "--sample", action="store_true",
        help="export the sampling policy instead of its mode: ONNX's takes its noise as inputs (float32 arrays the caller "
        "draws, e.g. with NumPy, as the JSON file says), StableHLO's the key's data as its last input",
    )  # fmt: skip
    ex.add_argument(
        "--noise", action="store_true",
        help="with --sample and --format stablehlo: take the noise as inputs, as ONNX does, instead of the key",
    )  # fmt: skip
    ex.add_argument(
        "--batch-size", type=positive(parse_int, 1 << 20), default=None, metavar="N",
        help="fix the batch dimension to N (default: symbolic)",
    )  # fmt: skip
    ex.add_argument("--force", action="store_true", help="replace FILE if it exists")
    add_trust_flag(ex)


def export_command(args: argparse.Namespace) -> int:
    parser = args._parser
    if args.noise and not args.sample:
        parser.error("argument --noise: needs --sample (a deterministic policy draws no noise)")
    try:
        checkpoint = chosen_checkpoint(args.run_dir, args.checkpoint, "exporting")
        record = export_run(
            args.run_dir, args.out, format=args.format, checkpoint=checkpoint, member=args.member,
            deterministic=not args.sample, noise=True if args.noise else None, batch_size=args.batch_size,
            overwrite=args.force,
        )  # fmt: skip
    except ValueError as e:
        parser.error(one_line(e))
    inputs = ", ".join(f"{i['name']}{i['shape']}" for i in record["inputs"])
    outputs = ", ".join(f"{o['name']}{o['shape']}" for o in record["outputs"])
    print(f"wrote {record['path']} ({record['converter']}) and {record['path']}.json")
    print(f"inputs: {inputs}; outputs: {outputs}")
    return 0
