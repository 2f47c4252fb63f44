"""Explicit SIMD for the two small fixed-width loops of the search, as numba intrinsics.

LLVM did not vectorize these loops when written in numba (16 rows or 4 boxes are too few for its loop
vectorizer once it must check for aliasing): 13 ns per row instead of ~1.5. Here the vector code is
emitted directly. Each lane does exactly the scalar operations (d = x - q; acc = acc + d * d, no fused
multiply-add, no reordering), so the costs are bit-identical to the canonical scalar sum.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic

__all__ = ["tile16_costs", "tile64_costs_into", "box4_distances"]


def _check_c(name, ty, ndim):
    if not (isinstance(ty, types.Array) and ty.dtype == types.float32 and ty.ndim == ndim and ty.layout == "C"):
        raise TypingError(f"{name}: expected a C-contiguous float32 array with {ndim} dimensions, got {ty}")


def _splat(builder, value, width):
    vt = ir.VectorType(value.type, width)
    v = builder.insert_element(ir.Constant(vt, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(v, ir.Constant(vt, ir.Undefined), ir.Constant(ir.VectorType(ir.IntType(32), width), [0] * width))


def _tiles_codegen(n_tiles, into=False):
    """Code for the costs of tiles s .. s + n_tiles - 1: n_tiles independent 16-lane accumulators, so
    the loop is bound by throughput rather than by the latency of one accumulator's additions."""
    ret = types.UniTuple(types.float32, 16 * n_tiles)

    def codegen(context, builder, signature, args):
        tiles_t, _, q_t = signature.args[:3]
        tiles, s, q = args[:3]
        tiles_a = context.make_array(tiles_t)(context, builder, tiles)
        q_a = context.make_array(q_t)(context, builder, q)
        s = context.cast(builder, s, signature.args[1], types.intp)
        nf = builder.extract_value(tiles_a.shape, 1)
        vt = ir.VectorType(ir.FloatType(), 16)
        width = ir.Constant(nf.type, 16)
        stride = builder.mul(nf, width)
        firsts = [builder.gep(tiles_a.data, [builder.mul(builder.add(s, ir.Constant(s.type, t)), stride)])
                  for t in range(n_tiles)]
        accs = [cgutils.alloca_once_value(builder, ir.Constant(vt, [0.0] * 16)) for _ in range(n_tiles)]
        with cgutils.for_range(builder, nf) as loop:
            j = loop.index
            qv = _splat(builder, builder.load(builder.gep(q_a.data, [j])), 16)
            o = builder.mul(j, width)
            for first, acc_ptr in zip(firsts, accs):
                x = builder.load(builder.bitcast(builder.gep(first, [o]), vt.as_pointer()), align=4)
                d = builder.fsub(x, qv)
                builder.store(builder.fadd(builder.load(acc_ptr), builder.fmul(d, d)), acc_ptr)
        if into:  # store the vectors to out[0 : 16 n_tiles]
            out_a = context.make_array(signature.args[3])(context, builder, args[3])
            for t, acc_ptr in enumerate(accs):
                dst = builder.bitcast(builder.gep(out_a.data, [ir.Constant(nf.type, 16 * t)]), vt.as_pointer())
                builder.store(builder.load(acc_ptr), dst, align=4)
            return context.get_dummy_value()
        lanes = []
        for acc_ptr in accs:
            acc = builder.load(acc_ptr)
            lanes += [builder.extract_element(acc, ir.Constant(ir.IntType(32), k)) for k in range(16)]
        return context.make_tuple(builder, ret, lanes)

    return ret, codegen


@intrinsic
def tile16_costs(typingctx, tiles_t, s_t, q_t):
    """Canonical costs of the 16 rows of tile s of `tiles` (T, F, 16), as a 16-tuple of float32."""
    _check_c("tile16_costs tiles", tiles_t, 3)
    _check_c("tile16_costs query", q_t, 1)
    ret, codegen = _tiles_codegen(1)
    return ret(tiles_t, s_t, q_t), codegen


@intrinsic
def tile64_costs_into(typingctx, tiles_t, s_t, q_t, out_t):
    """Canonical costs of the 64 rows of tiles s .. s+3 of `tiles` (T, F, 16), written to out[:64]
    (C-contiguous float32, at least 64 long: not checked)."""
    _check_c("tile64_costs tiles", tiles_t, 3)
    _check_c("tile64_costs query", q_t, 1)
    _check_c("tile64_costs out", out_t, 1)
    _, codegen = _tiles_codegen(4, into=True)
    return types.none(tiles_t, s_t, q_t, out_t), codegen


@intrinsic
def box4_distances(typingctx, lo_t, hi_t, g_t, q_t):
    """Squared distances from q to the 4 boxes of group g, bounds `lo`, `hi` (G, F, 4): a 4-tuple.

    Per lane and column: d = max(lo - q, 0) + max(q - hi, 0); acc = acc + d * d. Empty boxes
    (lo = +inf, hi = -inf) give +inf.
    """
    _check_c("box4_distances lo", lo_t, 3)
    _check_c("box4_distances hi", hi_t, 3)
    _check_c("box4_distances query", q_t, 1)
    ret = types.UniTuple(types.float32, 4)

    def codegen(context, builder, signature, args):
        lo, hi, g, q = args
        lo_a = context.make_array(lo_t)(context, builder, lo)
        hi_a = context.make_array(hi_t)(context, builder, hi)
        q_a = context.make_array(q_t)(context, builder, q)
        g = context.cast(builder, g, signature.args[2], types.intp)
        nf = builder.extract_value(lo_a.shape, 1)
        f32 = ir.FloatType()
        vt = ir.VectorType(f32, 4)
        width = ir.Constant(nf.type, 4)
        off = builder.mul(g, builder.mul(nf, width))
        lo_p = builder.gep(lo_a.data, [off])
        hi_p = builder.gep(hi_a.data, [off])
        zero = ir.Constant(vt, [0.0] * 4)
        acc_ptr = cgutils.alloca_once_value(builder, zero)
        with cgutils.for_range(builder, nf) as loop:
            j = loop.index
            o = builder.mul(j, width)
            vlo = builder.load(builder.bitcast(builder.gep(lo_p, [o]), vt.as_pointer()), align=4)
            vhi = builder.load(builder.bitcast(builder.gep(hi_p, [o]), vt.as_pointer()), align=4)
            qv = _splat(builder, builder.load(builder.gep(q_a.data, [j])), 4)
            below = builder.fsub(vlo, qv)
            above = builder.fsub(qv, vhi)
            below = builder.select(builder.fcmp_ordered(">", below, zero), below, zero)
            above = builder.select(builder.fcmp_ordered(">", above, zero), above, zero)
            d = builder.fadd(below, above)
            builder.store(builder.fadd(builder.load(acc_ptr), builder.fmul(d, d)), acc_ptr)
        acc = builder.load(acc_ptr)
        lanes = [builder.extract_element(acc, ir.Constant(ir.IntType(32), k)) for k in range(4)]
        return context.make_tuple(builder, ret, lanes)

    return ret(lo_t, hi_t, g_t, q_t), codegen
