"""The "Which model?" page shows the tree benchmark's committed results, not an older copy of them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "guide" / "which-model.md"
REFRESH = "rerun `python docs/make_images.py trees` and paste its table into docs/guide/which-model.md"


def _make_images():
    spec = importlib.util.spec_from_file_location("make_images", ROOT / "docs" / "make_images.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_page_table_is_the_results_table():
    table = _make_images().trees_table()
    assert table in PAGE.read_text(), f"the page's table differs from benchmarks/results/trees/trees.md: {REFRESH}"


def test_table_reads_means_and_marks_missed_bounds(tmp_path):
    (tmp_path / "trees.md").write_text(
        "# Tree peers, DI >= 0.8 (means over seeds)\n\ncommit abc1234; last command `x`.\n\n"
        "| dataset | method | needs s | train DI | test DI | train acc | test acc | fit s |\n"
        "|---|---|---|---|---|---|---|---|\n"
        "| adult | fairopt-gbm | no | 0.8000 | 0.7918 | 0.86 | 0.85024 | 1.0 |\n"
        "| adult | lightgbm | no | 0.3204 | 0.3030 | 0.89 | 0.8612 | 1.0 |\n")
    table = _make_images().trees_table(tmp_path).splitlines()
    assert "commit abc1234" in table[0] and "below 0.795" in table[0]
    gbm = next(line for line in table if line.startswith('| `model="gbm"` |'))
    assert gbm.split(" | ")[2] == "0.850 / 0.79"  # adult; the other data sets are absent
    assert gbm.split(" | ")[3] == "-"
    free = next(line for line in table if line.startswith("| LightGBM"))
    assert free.split(" | ")[2] == "0.861 / 0.30*"  # training DI below the bound


def test_page_plots_are_the_results_plots():
    images = _make_images()
    for dataset in images.TREE_DATASETS:
        copy = images.IMAGES / f"trees_{dataset}.png"
        assert copy.read_bytes() == (images.TREES / f"tradeoff_{dataset}.png").read_bytes(), \
            f"{copy.name} is not benchmarks/results/trees/tradeoff_{dataset}.png: {REFRESH}"
        assert f"../images/trees_{dataset}.png" in PAGE.read_text()
