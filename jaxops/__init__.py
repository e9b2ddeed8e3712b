"""jaxops: ONNX operators as pure, jit-compilable, differentiable JAX functions.

The ONNX front end (``jaxops.onnx.Backend``) lives in ``jaxops.onnx`` and needs the ``onnx``
package; this namespace needs only jax and numpy.
"""

__version__ = "0.1.0"

from jaxops._cast import cast as cast, cast_like as cast_like
from jaxops._constant import constant_of_shape as constant_of_shape
from jaxops._grid_sample import affine_grid as affine_grid
from jaxops._grid_sample import grid_sample as grid_sample
from jaxops._pool import average_pool as average_pool
from jaxops._pool import global_average_pool as global_average_pool
from jaxops._resize import resize as resize
from jaxops._roi_align import roi_align as roi_align

__all__: list[str] = [
    "affine_grid",
    "average_pool",
    "cast",
    "cast_like",
    "constant_of_shape",
    "global_average_pool",
    "grid_sample",
    "resize",
    "roi_align",
]
