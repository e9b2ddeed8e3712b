"""jaxops: ONNX operators as pure, jit-compilable, differentiable JAX functions.

The ONNX front end (``jaxops.onnx.Backend``) lives in ``jaxops.onnx`` and needs the ``onnx``
package; this namespace needs only jax and numpy.
"""

__version__ = "0.1.0"

from jaxops._cast import cast as cast, cast_like as cast_like
from jaxops._constant import constant_of_shape as constant_of_shape
from jaxops._lp_pool import global_lp_pool as global_lp_pool
from jaxops._lp_pool import lp_pool as lp_pool
from jaxops._max_pool import global_max_pool as global_max_pool
from jaxops._max_pool import max_pool as max_pool
from jaxops._max_pool import max_unpool as max_unpool
from jaxops._pool import average_pool as average_pool
from jaxops._pool import global_average_pool as global_average_pool
from jaxops._resize import resize as resize

__all__: list[str] = [
    "average_pool",
    "cast",
    "cast_like",
    "constant_of_shape",
    "global_average_pool",
    "global_lp_pool",
    "global_max_pool",
    "lp_pool",
    "max_pool",
    "max_unpool",
    "resize",
]
