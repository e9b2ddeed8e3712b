"""jaxops: ONNX operators as pure, jit-compilable, differentiable JAX functions.

The ONNX front end (``jaxops.onnx.Backend``) lives in ``jaxops.onnx`` and needs the ``onnx``
package; this namespace needs only jax and numpy.
"""

__version__ = "0.1.0"

from jaxops._resize import resize as resize

__all__: list[str] = ["resize"]
