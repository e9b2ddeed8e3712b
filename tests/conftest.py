"""Test configuration: 64-bit types on (the ops take float64/int64), strict rank promotion."""

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")
