"""Results to numbers a reader compares: per-target summaries (``_summary``), a
Markdown table with the targets side by side (``_table``), and PNG plots
(``_plot``), over the columns of ``_columns``. Everything here is recomputed from
the raw units in ``results.json``, so ``bench report`` gives the same table as the
run that wrote them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._columns import Column, columns
from ._plot import KL_FLOOR, acceptance_series, kl_bins, plot
from ._summary import decode_steps, kld_texts, summarize
from ._table import humaneval_diff, table

__all__ = [
    "KL_FLOOR",
    "Column",
    "acceptance_series",
    "columns",
    "decode_steps",
    "humaneval_diff",
    "kl_bins",
    "kld_texts",
    "plot",
    "summarize",
    "table",
    "write_outputs",
]


def write_outputs(data: dict[str, Any], out_dir: Path) -> tuple[str, list[Path]]:
    """table.md, summary (into the data) and plots of one result directory."""
    cols = columns([data])
    data["summary"] = {c.label: summarize(c) for c in cols}
    text = table(cols)
    (out_dir / "table.md").write_text(text, encoding="utf-8")
    return text, plot(cols, out_dir)
