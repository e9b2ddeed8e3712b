"""Benchmarks: jaxops against onnxruntime, PyTorch, jax.image, Flax and NumPy, in one process.

Run ``make bench`` or ``python -m benchmarks.run --help``. The command writes
``benchmarks/RESULTS.md`` and ``benchmarks/ratios.png``; neither is edited by hand.
"""
