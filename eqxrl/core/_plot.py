"""Figures for learning curves, PBT histories and skill plots: one way to make and write them."""

import io


def figure(figsize: tuple[float, float] = (6.4, 4.0)):
    """A Matplotlib `Figure` with constrained layout.

    The object-oriented API renders with Agg and leaves pyplot's global backend
    (and a user's interactive session) alone.
    """
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout="constrained")


def png_bytes(fig, dpi: int = 100) -> bytes:
    """**Returns:** `fig` rendered as PNG (write it atomically where it must survive a crash)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()
