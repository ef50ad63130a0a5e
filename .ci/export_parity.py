"""Parity of exported policies, run where eqxrl (and, for ONNX, JAX) cannot be imported.

    python .ci/export_parity.py DIR --format onnx        # onnxruntime + numpy only
    python .ci/export_parity.py DIR --format stablehlo   # jax + numpy, without eqxrl

DIR holds, per case, `<case>.<format>` (written by `eqxrl.export`) and `<case>.npz`: inputs
`in:<name>` (1,000 recorded observations, carries, resets) and expected outputs `out:<name>`
(`action` from `eqxrl.runs.load_policy`; scores, env actions and carries from the unexported
function). A sampling policy that takes its noise as inputs is `<case>-sample.<format>`, its
`<case>-sample.npz` the same observations with the noise (`in:noise`, `in:noise.<name>`: drawn by
NumPy with the lines of the policy's JSON description) and the outputs eqxrl computes from that
noise (`act_from_noise`). Written by tests/runs/test_export.py (into $EQXRL_EXPORT_PARITY_DIR when set).
Every output must be within 1e-5 of the expected one, relatively where the expected value is above 1
in magnitude (float32 keeps about 7 significant digits: a C51 head's expected return of 60 moves in
steps of 4e-6); a discrete action must equal it except where the argmax that picked it was a near
tie: the two best expected scores within that tolerance, or, where the npz has it, `margin:action`
(the gap of that argmax: of logits plus Gumbel noise for a sampling policy) within it. Prints one
line per case; exits 1 if any fails.
"""

import argparse
import importlib.abc
import json
import pathlib
import sys

TOLERANCE = 1e-5


class _Forbid(importlib.abc.MetaPathFinder):
    def __init__(self, names):
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.names:
            raise ImportError(f"{fullname} must not be imported here (export parity runs without {', '.join(self.names)})")
        return None


def _runner(fmt, path):
    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return lambda inputs: dict(zip(names, session.run(None, inputs)))
    import jax

    exported = jax.export.deserialize(bytearray(path.read_bytes()))
    names = [o["name"] for o in json.loads(pathlib.Path(f"{path}.json").read_text())["outputs"]]
    order = [i["name"] for i in json.loads(pathlib.Path(f"{path}.json").read_text())["inputs"]]
    return lambda inputs: dict(zip(names, (np.asarray(x) for x in exported.call(*(inputs[n] for n in order)))))


def check(fmt, path, data):
    """**Returns:** `(max error over float outputs, relative above 1 in magnitude, greedy actions differing
    outside near ties, message)`."""
    inputs = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
    expected = {k[4:]: data[k] for k in data.files if k.startswith("out:")}
    margin = data["margin:action"] if "margin:action" in data.files else None
    got = _runner(fmt, path)(inputs)
    worst, bad, problems = 0.0, 0, []
    for name, want in expected.items():
        have = np.asarray(got[name])
        if have.shape != want.shape:
            problems.append(f"{name}: shape {have.shape} != {want.shape}")
            continue
        if np.issubdtype(want.dtype, np.floating):
            want64 = want.astype(np.float64)
            error = np.abs(have.astype(np.float64) - want64) / np.maximum(1.0, np.abs(want64))
            worst = max(worst, float(np.max(error, initial=0.0)))
            continue
        differ = have != want
        if name == "action" and margin is not None:  # ties: the argmax that picked the action
            differ &= margin > TOLERANCE
        elif name == "action" and "scores" in expected:  # ties: the two best scores within the tolerance
            top2 = np.sort(expected["scores"].astype(np.float64), axis=-1)[..., -2:]
            differ &= (top2[..., 1] - top2[..., 0]) > TOLERANCE * np.maximum(1.0, np.abs(top2[..., 1]))
        bad += int(differ.sum())
    if worst > TOLERANCE:
        problems.append(f"max error {worst:.3g} > {TOLERANCE}")
    if bad:
        problems.append(f"{bad} actions differ outside near ties")
    return worst, bad, "; ".join(problems)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=pathlib.Path)
    parser.add_argument("--format", choices=("onnx", "stablehlo"), required=True)
    args = parser.parse_args(argv)
    sys.meta_path.insert(0, _Forbid(("eqxrl", "jax", "jaxlib") if args.format == "onnx" else ("eqxrl",)))
    global np
    import numpy as np

    files = sorted(args.dir.glob(f"*.{args.format}"))
    if not files:
        print(f"no *.{args.format} files in {args.dir}", file=sys.stderr)
        return 1
    failed = 0
    for path in files:
        data = np.load(path.with_suffix(".npz"))
        worst, _, problem = check(args.format, path, data)
        n = len(next(iter(data[k] for k in data.files if k.startswith("in:"))))
        print(f"{path.stem:<21} {args.format:<9} {n} observations  max error {worst:.2e}  {problem or 'ok'}")
        failed += bool(problem)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
