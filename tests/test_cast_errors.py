"""Malformed calls of jaxops.cast / jaxops.cast_like and of the Cast, CastLike and
ConstantOfShape nodes: each is a ValueError, TypeError or NotImplementedError whose message
names the op and the argument (or attribute, or input) at fault."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

import jaxops
from jaxops.onnx import Backend

X = np.ones(3, np.float32)
F8 = np.dtype(ml_dtypes.float8_e4m3fn)

_TO = r"jaxops.cast: argument `to` must be"
_X = r"jaxops.cast: argument `x`"
_LIKE = r"jaxops.cast_like: argument `like` must be an array whose dtype is an ONNX element type"
_SAT = r"argument `saturate` must be a bool \(or the ONNX integers 0/1\)"
_MODE = r"argument `round_mode` must be one of 'up', 'down', 'nearest'"

# (call, exception, message pattern)
_BAD_CALLS = {
    "to None": (lambda: jaxops.cast(X, None), TypeError, _TO),
    "to bool": (lambda: jaxops.cast(X, True), TypeError, _TO),
    "to float": (lambda: jaxops.cast(X, 1.0), TypeError, _TO),
    "to list": (lambda: jaxops.cast(X, [1]), TypeError, _TO),
    "to array": (lambda: jaxops.cast(X, np.array(1)), TypeError, _TO + r" .*not an array"),
    "to traced": (lambda: jax.jit(lambda t: jaxops.cast(X, t))(1), TypeError, _TO),
    "to unknown enum": (lambda: jaxops.cast(X, 99), ValueError, _TO),
    "to zero enum": (lambda: jaxops.cast(X, 0), ValueError, _TO),
    "to negative enum": (lambda: jaxops.cast(X, -1), ValueError, _TO),
    "to unknown name": (lambda: jaxops.cast(X, "FLOAT9"), ValueError, _TO),
    "to empty name": (lambda: jaxops.cast(X, ""), ValueError, _TO),
    "to UNDEFINED": (lambda: jaxops.cast(X, "UNDEFINED"), ValueError, _TO),
    "to undecodable bytes": (lambda: jaxops.cast(X, b"\xff"), ValueError, _TO),
    "to datetime": (lambda: jaxops.cast(X, np.dtype("M8[s]")), ValueError,
                    r"jaxops.cast: argument `to`: dtype datetime64\[s\] has no ONNX element type"),
    "to longdouble": (lambda: jaxops.cast(X, np.longdouble), ValueError,
                      r"jaxops.cast: argument `to`: dtype float128 has no ONNX element type"),
    "to complex": (lambda: jaxops.cast(X, "COMPLEX64"), TypeError,
                   r"jaxops.cast: argument `to` must be a real ONNX element type"),
    "to float6": (lambda: jaxops.cast(X, "FLOAT6E2M3"), TypeError,
                  r"jaxops.cast: argument `to`: FLOAT6E2M3 .* installed JAX/XLA cannot convert"),
    "saturate None": (lambda: jaxops.cast(X, F8, saturate=None), TypeError, _SAT),
    "saturate 2": (lambda: jaxops.cast(X, F8, saturate=2), TypeError, _SAT),
    "saturate float": (lambda: jaxops.cast(X, F8, saturate=1.0), TypeError, _SAT),
    "saturate str": (lambda: jaxops.cast(X, F8, saturate="yes"), TypeError, _SAT),
    "saturate array": (lambda: jaxops.cast(X, F8, saturate=np.array(True)), TypeError, _SAT),
    "saturate traced": (lambda: jax.jit(lambda s: jaxops.cast(X, F8, saturate=s))(True),
                        TypeError, r"jaxops.cast: argument `saturate` must be a Python bool"),
    "round_mode None": (lambda: jaxops.cast(X, "FLOAT8E8M0", round_mode=None), ValueError, _MODE),
    "round_mode int": (lambda: jaxops.cast(X, "FLOAT8E8M0", round_mode=1), ValueError, _MODE),
    "round_mode case": (lambda: jaxops.cast(X, "FLOAT8E8M0", round_mode="UP"), ValueError, _MODE),
    "round_mode bytes": (lambda: jaxops.cast(X, "FLOAT8E8M0", round_mode=b"\xff"), ValueError,
                         _MODE),
    "x None": (lambda: jaxops.cast(None, "FLOAT"), TypeError, _X + " must be an array"),
    "x dict": (lambda: jaxops.cast({}, "FLOAT"), TypeError, _X + " must be an array"),
    "x ragged": (lambda: jaxops.cast([[1, 2], [3]], "FLOAT"), TypeError, _X + " must be an array"),
    "x complex": (lambda: jaxops.cast(np.ones(2, np.complex64), "FLOAT"), TypeError,
                  _X + " has complex dtype complex64"),
    "x complex to STRING": (lambda: jaxops.cast(np.ones(2, np.complex128), "STRING"), TypeError,
                            _X + " has complex dtype complex128"),
    "x datetime": (lambda: jaxops.cast(np.zeros(1, "M8[D]"), "FLOAT"), TypeError,
                   _X + r" has dtype datetime64\[D\], which has no ONNX element type"),
    "x longdouble": (lambda: jaxops.cast(np.ones(1, np.longdouble), "FLOAT"), TypeError,
                     _X + " has dtype float128"),
    "x float6": (lambda: jaxops.cast(np.ones(2, ml_dtypes.float6_e2m3fn), "FLOAT"), TypeError,
                 _X + ": FLOAT6E2M3 .* installed JAX/XLA cannot convert"),
    "x text no number": (lambda: jaxops.cast(np.array(["Hello"]), "FLOAT"), ValueError,
                         _X + ": the string 'Hello' is not a number"),
    "x text underscore": (lambda: jaxops.cast(np.array(["1_0"]), "INT64"), ValueError,
                          _X + ": the string '1_0' is not a number"),
    "x text None": (lambda: jaxops.cast(np.array([None], object), "FLOAT"), ValueError,
                    _X + ": the string 'None' is not a number"),
    "x text inf to int": (lambda: jaxops.cast(np.array(["inf"]), "INT4"), ValueError,
                          _X + ": the string 'inf' is inf and has no integer value"),
    "x undecodable": (lambda: jaxops.cast(np.array([b"\xff"], object), "FLOAT"), ValueError,
                      _X + r": the bytes b'\\xff' are not UTF-8 text"),
    "x text traced": (lambda: jax.jit(lambda v: jaxops.cast(v, "STRING"))(jnp.ones(2)),
                      TypeError, r"jaxops.cast: casting to STRING runs on the host"),
    "like None": (lambda: jaxops.cast_like(X, None), TypeError, _LIKE),
    "like name": (lambda: jaxops.cast_like(X, "FLOAT"), TypeError, _LIKE),
    "like dtype": (lambda: jaxops.cast_like(X, np.float16), TypeError, _LIKE),
    "like dict": (lambda: jaxops.cast_like(X, {}), TypeError, _LIKE),
    "like ragged": (lambda: jaxops.cast_like(X, [[1], [2, 3]]), TypeError, _LIKE),
    "like complex": (lambda: jaxops.cast_like(X, np.ones(1, np.complex64)), TypeError, _LIKE),
    "like void": (lambda: jaxops.cast_like(X, np.zeros(1, "V4")), TypeError, _LIKE),
    "like datetime": (lambda: jaxops.cast_like(X, np.zeros(1, "M8[D]")), TypeError, _LIKE),
    "like float6": (lambda: jaxops.cast_like(X, np.ones(1, ml_dtypes.float6_e2m3fn)), TypeError,
                    r"jaxops.cast_like: argument `like`: FLOAT6E2M3 .* installed JAX/XLA cannot"),
    "like saturate": (lambda: jaxops.cast_like(X, np.zeros(1, F8), saturate="no"), TypeError,
                      r"jaxops.cast_like: " + _SAT),
    "like round_mode": (lambda: jaxops.cast_like(X, np.zeros(1, ml_dtypes.float8_e8m0fnu),
                                                 round_mode="ceil"), ValueError,
                        r"jaxops.cast_like: " + _MODE),
    "like x complex": (lambda: jaxops.cast_like(np.ones(1, np.complex64), np.zeros(1)), TypeError,
                       r"jaxops.cast_like: argument `x` has complex dtype"),
}


@pytest.mark.parametrize("name", list(_BAD_CALLS))
def test_malformed_calls_name_op_and_argument(name):
  call, exc, match = _BAD_CALLS[name]
  with pytest.raises(exc, match=match) as info:
    call()
  assert type(info.value) in (ValueError, TypeError, NotImplementedError)  # not a subclass
  assert str(info.value).startswith(("jaxops.cast: ", "jaxops.cast_like: "))


# --- the ONNX front end -------------------------------------------------------------------------


def _node(op, inputs, **attrs):
  return helper.make_node(op, inputs, ["y"], **attrs)


_SHAPE = np.array([2], np.int64)
_VALUE2 = onnx.numpy_helper.from_array(np.array([1.0, 2.0], np.float32))

# (node, inputs, opset, exception, message pattern). The backend checks attribute names and
# types against the schema when the model is prepared, and input types and ranks before a node
# runs (jaxops/onnx/_registry.py: check_attributes, check_node); the adapters check the rest.
_NODE = r"jaxops.onnx: node '' "
_BAD_NODES = {
    "Cast without to": (_node("Cast", ["x"]), [X], 13, ValueError,
                        _NODE + r"\(Cast-13\): needs the attribute `to`"),
    "Cast to unknown enum": (_node("Cast", ["x"], to=99), [X], 13, ValueError,
                             _NODE + r"\(Cast-13\): Cast version 13: argument `to` must be "
                             r"an ONNX"),
    "Cast to a float": (_node("Cast", ["x"], to=1.5), [X], 13, TypeError,
                        _NODE + r"\(Cast-13\): attribute `to` must be of type INT; got FLOAT"),
    "Cast-13 to a name": (_node("Cast", ["x"], to="FLOAT"), [X], 13, TypeError,
                          _NODE + r"\(Cast-13\): attribute `to` must be of type INT; got STRING"),
    "Cast-1 to an enum": (_node("Cast", ["x"], to=1), [X], 1, TypeError,
                          _NODE + r"\(Cast-1\): attribute `to` must be of type STRING; got INT"),
    "Cast-1 unknown name": (_node("Cast", ["x"], to="FLOATY"), [X], 1, ValueError,
                            _NODE + r"\(Cast-1\): Cast version 1: argument `to` must be an "
                            r"ONNX type"),
    "Cast unknown attribute": (_node("Cast", ["x"], to=1, foo=3), [X], 13, ValueError,
                               _NODE + r"\(Cast-13\): has no attribute `foo`"),
    "Cast-13 saturate": (_node("Cast", ["x"], to=17, saturate=1), [X], 13, ValueError,
                         _NODE + r"\(Cast-13\): has no attribute `saturate`"),
    "Cast saturate 2": (_node("Cast", ["x"], to=17, saturate=2), [X], 19, TypeError, _SAT),
    "Cast saturate str": (_node("Cast", ["x"], to=17, saturate="1"), [X], 19, TypeError,
                          _NODE + r"\(Cast-19\): attribute `saturate` must be of type INT"),
    "Cast round_mode": (_node("Cast", ["x"], to=24, round_mode="ceil"), [X], 24, ValueError,
                        _MODE),
    "Cast no input": (_node("Cast", [], to=1), [], 13, ValueError,
                      _NODE + r"\(Cast-13\): takes 1 input\(s\), the first 1 named; got 0 "),
    "Cast complex input": (_node("Cast", ["x"], to=1), [np.ones(2, np.complex64)], 13, TypeError,
                           _NODE + r"\(Cast-13\): input 0 \(`input`\) has element type "
                           r"COMPLEX64"),
    "Cast to complex": (_node("Cast", ["x"], to=T.COMPLEX64), [X], 13, TypeError,
                        _NODE + r"\(Cast-13\): Cast version 13 does not allow `to` of type "
                        r"COMPLEX64"),
    "CastLike one input": (_node("CastLike", ["x"]), [X], 15, ValueError,
                           _NODE + r"\(CastLike-15\): takes 2 input\(s\), .*; got 1 "),
    "CastLike saturate at 15": (_node("CastLike", ["x", "l"], saturate=0), [X, X], 15,
                                ValueError, _NODE + r"\(CastLike-15\): has no attribute "
                                r"`saturate`"),
    "ConstantOfShape two values": (_node("ConstantOfShape", ["s"], value=_VALUE2), [_SHAPE], 9,
                                   ValueError, r"jaxops.constant_of_shape: argument `value` must "
                                   r"be a one-element array"),
    "ConstantOfShape float value": (_node("ConstantOfShape", ["s"], value=1.5), [_SHAPE], 9,
                                    TypeError, _NODE + r"\(ConstantOfShape-9\): attribute "
                                    r"`value` must be of type TENSOR"),
    "ConstantOfShape negative": (_node("ConstantOfShape", ["s"]), [np.array([-2], np.int64)], 9,
                                 ValueError, r"argument `shape` must be dims >= 0"),
    "ConstantOfShape float shape": (_node("ConstantOfShape", ["s"]), [np.array([2.0])], 9,
                                    TypeError, _NODE + r"\(ConstantOfShape-9\): input 0 "
                                    r"\(`input`\) has element type DOUBLE"),
    "ConstantOfShape 2-D shape": (_node("ConstantOfShape", ["s"]), [np.array([[2]], np.int64)],
                                  9, ValueError, _NODE + r"\(ConstantOfShape-9\): input 0 "
                                  r"\(`input`\) has rank 2"),
    "ConstantOfShape no input": (_node("ConstantOfShape", []), [], 9, ValueError,
                                 _NODE + r"\(ConstantOfShape-9\): takes 1 input\(s\), .*; got 0 "),
    "ConstantOfShape huge": (_node("ConstantOfShape", ["s"]), [np.array([2**40, 2**30], np.int64)],
                             9, ValueError, r"jaxops.constant_of_shape: the output would have "
                             r"shape \(1099511627776, 1073741824\)"),
}


@pytest.mark.parametrize("name", list(_BAD_NODES))
def test_malformed_nodes_name_op_and_argument(name):
  node, inputs, opset, exc, match = _BAD_NODES[name]
  with pytest.raises(exc, match=match) as info:
    Backend.run_node(node, inputs, opset_version=opset)
  assert type(info.value) in (ValueError, TypeError, NotImplementedError)
  assert str(info.value).startswith("jaxops.")
  assert str(info.value).count("jaxops.onnx:") <= 1  # the node's label once, not nested
