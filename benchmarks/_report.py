"""The benchmarks' one report module: the header every results file starts with, Markdown tables, the
command-line options the scripts share and ``--out``.

A script makes a `Report` when it starts (it records the time, the load average and the arguments),
builds its parser with `parser`, and ends with ``report.emit(markdown, args.out)``, which prints the
record and writes it to ``benchmarks/results/<name>.md`` (``--out PATH`` elsewhere, ``--out -``
nowhere). ``report.header(title)`` gives the lines every record starts with: the date, the library
versions, eqxrl's git revision, the machine (backend, core count, CPU model, load average at the start
and at the end), the command and the wall time.

Nothing here imports eqxrl, and jax only when a header is rendered, so the QDax side of
``pbt_qdax.py`` (another virtual environment) can use `package_versions`.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

def cold_compiles() -> None:
    """Benchmarks time cold compiles: eqxrl's persistent compilation cache (on at `import eqxrl`)
    stays off in this process and in every process it starts, unless the caller set
    `EQXRL_COMPILE_CACHE` (compile_cache.py sets it per run). Called when this module is
    imported; an eqxrl imported before has not compiled yet, so its cache is switched off."""
    if os.environ.setdefault("EQXRL_COMPILE_CACHE", "off") == "off" and "eqxrl" in sys.modules:
        sys.modules["eqxrl"].core.configure_compile_cache(False)


cold_compiles()

BENCHMARKS = Path(__file__).resolve().parent
RESULTS = BENCHMARKS / "results"
CORE_PACKAGES = ("jax", "jaxlib", "equinox", "optax", "gymnax")


# ============================================================================ the machine and the code
def package_versions(packages: Iterable[str] = CORE_PACKAGES) -> dict[str, str]:
    """Installed version of each package (those not installed are left out)."""
    out = {}
    for name in packages:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
    return out


def versions(*extra: str) -> str:
    """``"jax 0.10.2, ..., Python 3.11.7"``: the core packages, then `extra`."""
    found = package_versions(CORE_PACKAGES + tuple(p for p in extra if p not in CORE_PACKAGES))
    return ", ".join(f"{k} {v}" for k, v in found.items()) + f", Python {platform.python_version()}"


def git_rev() -> str:
    """``"commit abc1234"``, noting uncommitted changes under ``eqxrl/``."""
    root = BENCHMARKS.parent
    if os.environ.get("EQXRL_BENCH_REV"):  # a copy without .git (a lent GPU machine): the caller says
        return f"commit {os.environ['EQXRL_BENCH_REV']}"
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "eqxrl"], cwd=root, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit"
    return f"commit {rev.stdout.strip()}" + (" (eqxrl/ has uncommitted changes)" if dirty.stdout.strip() else "")


def nproc() -> str:
    """The cores this process may use (``nproc``), else ``os.cpu_count()``."""
    try:
        return subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return str(os.cpu_count())


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def load_average() -> str:
    """The 1/5/15-minute load average, ``"1.2/0.8/0.5"``."""
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def fmt_value(v) -> str:
    return f"{v:g}" if isinstance(v, float) else repr(v)


def agent_fields(agent) -> str:
    """Every hyperparameter of an agent (defaults included, the env left out), for the record."""
    out = []
    for f in dataclasses.fields(agent):
        if f.name == "env":
            continue
        v = getattr(agent, f.name)
        if getattr(v, "shape", None) == ():
            v = float(v)
        out.append(f"{f.name}={fmt_value(v)}")
    return ", ".join(out)


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


# ============================================================================ command line
def parser(doc: str | None, name: str, *, runs: int | None = None, quick: str | None = None) -> argparse.ArgumentParser:
    """A script's parser: its description (the docstring's first paragraph), ``--out`` (default
    ``benchmarks/results/<name>.md``), and, where given, ``--runs`` (its default) and ``--quick`` (its help)."""
    p = argparse.ArgumentParser(description=(doc or name).split("\n\n")[0])
    if runs is not None:
        p.add_argument("--runs", type=int, default=runs, help=f"timed runs per cell, median reported (default {runs})")
    if quick is not None:
        p.add_argument("--quick", action="store_true", help=quick)
    p.add_argument(
        "--out", type=Path, default=RESULTS / f"{name}.md", help="where to write the Markdown record ('-' for nowhere)"
    )
    return p


# ============================================================================ the record
class Report:
    """One invocation of a benchmark script: renders the header of its record and writes the record."""

    def __init__(self, script: str, argv: Sequence[str] | None = None):
        self.script = Path(script).name
        self.argv = list(sys.argv[1:] if argv is None else argv)
        self.start = time.perf_counter()
        self.load_start = load_average()
        print(f"{self.script}: {versions()}; {nproc()} cores, load {self.load_start}", flush=True)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    @property
    def command(self) -> str:
        return " ".join(["python", f"benchmarks/{self.script}", *self.argv])

    def header(self, title: str, packages: Sequence[str] = (), wall: str = "") -> list[str]:
        """The title and the lines every record starts with; `packages` are versioned beside the core
        ones, `wall` is appended to the wall-time line."""
        import jax

        return [
            f"# {title}",
            "",
            f"- date: {datetime.date.today().isoformat()}",
            f"- versions: {versions(*packages)}; eqxrl at {git_rev()}",
            f"- machine: {jax.default_backend()} backend ({jax.devices()[0].device_kind}, {jax.device_count()} "
            f"device{'s' if jax.device_count() > 1 else ''}), nproc = {nproc()} ({cpu_model()}); shared machine, "
            f"timings are noisy (1/5/15-min load average at start {self.load_start}, at end {load_average()})",
            f"- command: `{self.command}`",
            f"- wall time of the whole benchmark: {duration(self.elapsed)}{wall}",
        ]

    def emit(self, markdown: str, out: Path | str) -> None:
        """Print the record and write it to `out` (``"-"``: nowhere)."""
        print()
        print(markdown)
        if str(out) != "-":
            out = Path(out)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(markdown)
            print(f"wrote {out}")


# ============================================================================ tables
def table(columns: Sequence[str], rows: Iterable[Sequence[object]], align: str | None = None) -> list[str]:
    """A Markdown table: `align` has one letter per column, ``l`` or ``r`` (default: the first column
    left, the others right)."""
    align = align or "l" + "r" * (len(columns) - 1)
    assert len(align) == len(columns), (align, columns)
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def median(values: Iterable[float | None]) -> float:
    """Median of the finite values (NaN where there are none)."""
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(vals) if vals else math.nan


@dataclasses.dataclass(frozen=True)
class Metric:
    """A row of a side-by-side table: `get` reads the value of one run, `fmt` formats a median.
    `higher`: True for a throughput, False for a time (the speed-up inverts the ratio), None for a value
    compared by its difference (a return)."""

    label: str
    get: Callable[[dict], float | None]
    fmt: str = "{:.2f}"
    higher: bool | None = True
    bold: bool = False


def compare(
    metrics: Sequence[Metric], left: Sequence[dict], right: Sequence[dict], group: str | None = None,
    speedup: bool = False,
) -> list[list[str]]:
    """Rows of medians of two libraries' runs side by side: [group,] metric, left, right, left / right
    [, left's speed-up]. A bold metric is bold in its label, values and last column."""
    rows = []
    for i, m in enumerate(metrics):
        a, b = median(map(m.get, left)), median(map(m.get, right))
        fin = not (math.isnan(a) or math.isnan(b))
        bold = "**" if m.bold else ""
        if m.higher is None:
            ratio, speed = (f"{a - b:+.1f} (diff.)" if fin else "n/a"), ""
        else:
            ratio = f"{a / b:.2f}" if fin and b else "n/a"
            speed = f"{(a / b if m.higher else b / a):.2f}" if fin and a and b else "n/a"
        cells = [
            f"{bold}{m.label}{bold}", *(f"{bold}{m.fmt.format(x)}{bold}" if not math.isnan(x) else "n/a" for x in (a, b))
        ]
        if speedup:
            cells += [ratio, f"{bold}{speed}{bold}" if speed else ""]
        else:
            cells.append(f"{bold}{ratio}{bold}")
        rows.append(([group if i == 0 else ""] if group is not None else []) + cells)
    return rows
