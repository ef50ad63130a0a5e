"""The command line called in-process, as the tests that check its output and errors call it."""

import contextlib
import io

import pytest

from eqxrl import cli


def main_output(argv):
    """`eqxrl ARGV` in this process; **returns** `(exit code, stdout)` (stderr is left to
    pytest's capsys; a SystemExit, argparse's exit 2, propagates)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(argv)
    return code, out.getvalue()


def main_captured(argv):
    """`eqxrl ARGV` in this process; **returns** `(exit code, stdout, stderr)`, argparse's
    SystemExit included as its code."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def usage_error(argv, capsys) -> str:
    """Run the CLI expecting exit 2; **returns** the one-line reason (after the usage line)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main_output(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("usage:"), lines
    return lines[1]
