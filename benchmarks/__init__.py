"""Benchmarks and paper reproductions of a source checkout (not installed with fairopt).

The scripts here run as ``python benchmarks/<script>.py``; the paper reproductions as
``python -m benchmarks.papers NAME`` (:mod:`benchmarks.papers`). A regular package, so that
the checkout's ``benchmarks`` is the one imported from the repository root.
"""
