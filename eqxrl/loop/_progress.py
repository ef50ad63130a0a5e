"""The progress bar of `train` and of PBT: one tqdm bar, off the compiled path."""

import time

__all__ = ["Progress"]


class Progress:
    """A tqdm bar over a run, updated by the host between compiled programs (or nothing, when disabled).

    **Arguments:**

    - `total`: the bar's length (env steps for `train`, generations for PBT).
    - `enabled`: show the bar.
    - `desc`: its label (`"PPO CartPole-v1"`).
    - `unit`: `"step"` (shown with k/M prefixes) or another unit (`"gen"`).
    - `initial`: where the bar starts (a resumed run).
    """

    def __init__(self, total: int, *, enabled: bool, desc: str, unit: str = "step", initial: int = 0):
        self.bar = None
        self.done = initial
        self.restart_clock()
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, unit_scale=unit == "step", dynamic_ncols=True)

    def restart_clock(self) -> None:
        """Measure the rate from now on (after compiling, say)."""
        self._t0, self._done0 = time.perf_counter(), self.done

    @property
    def rate(self) -> float:
        """Units done per second since the clock was (re)started."""
        return (self.done - self._done0) / max(time.perf_counter() - self._t0, 1e-9)

    def update(self, done: int, *, show_rate: bool = False, **postfix: str) -> None:
        """Move the bar to `done` and show `postfix` (e.g. `ret="195.0"`) beside it,
        after `sps=` (the rate since the clock started, `done` included) with `show_rate`."""
        moved = done - self.done
        self.done = done
        if self.bar is None:
            return
        self.bar.update(moved)
        if show_rate:
            postfix = {"sps": f"{self.rate:,.0f}", **postfix}
        if postfix:
            self.bar.set_postfix(postfix, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
