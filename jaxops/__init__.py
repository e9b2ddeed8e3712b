"""jaxops: ONNX operators as pure, jit-compilable, differentiable JAX functions.

The ONNX front end (``jaxops.onnx.Backend``) lives in ``jaxops.onnx`` and needs the ``onnx``
package; this namespace needs only jax and numpy.
"""

__version__ = "0.1.0"

from jaxops._cast import cast as cast, cast_like as cast_like
from jaxops._constant import constant_of_shape as constant_of_shape

__all__: list[str] = [
    "cast",
    "cast_like",
    "constant_of_shape",
]
