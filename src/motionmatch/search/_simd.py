"""Explicit SIMD for the small fixed-width loops of the search, as numba intrinsics.

LLVM did not vectorize these loops when written in numba (16 rows or 16 boxes are too few for its loop
vectorizer once it must check for aliasing): 13 ns per row instead of ~1.5. Here the vector code is
emitted directly. Each lane does exactly the scalar operations (d = x - q; acc = acc + d * d, no fused
multiply-add, no reordering), so the costs are bit-identical to the canonical scalar sum, also when a
sum is run in pieces of columns (the accumulator is stored as float32 between pieces).
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic

__all__ = ["tile64_costs_into", "rows16_accumulate", "box16_accumulate"]


def _check_c(name, ty, ndim):
    if not (isinstance(ty, types.Array) and ty.dtype == types.float32 and ty.ndim == ndim and ty.layout == "C"):
        raise TypingError(f"{name}: expected a C-contiguous float32 array with {ndim} dimensions, got {ty}")


def _splat(builder, value, width):
    """A vector of `width` copies of a scalar."""
    vt = ir.VectorType(value.type, width)
    v = builder.insert_element(ir.Constant(vt, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(v, ir.Constant(vt, ir.Undefined), ir.Constant(ir.VectorType(ir.IntType(32), width), [0] * width))


def _tiles_codegen(n_tiles):
    """Code storing the costs of tiles s .. s + n_tiles - 1 to out[0 : 16 n_tiles]: n_tiles independent
    16-lane accumulators, so the loop is bound by throughput rather than by the latency of one
    accumulator's additions."""

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
        out_a = context.make_array(signature.args[3])(context, builder, args[3])
        for t, acc_ptr in enumerate(accs):
            dst = builder.bitcast(builder.gep(out_a.data, [ir.Constant(nf.type, 16 * t)]), vt.as_pointer())
            builder.store(builder.load(acc_ptr), dst, align=4)
        return context.get_dummy_value()

    return codegen


@intrinsic
def tile64_costs_into(typingctx, tiles_t, s_t, q_t, out_t):
    """Canonical costs of the 64 rows of tiles s .. s+3 of `tiles` (T, F, 16), written to out[:64]
    (C-contiguous float32, at least 64 long: not checked)."""
    _check_c("tile64_costs tiles", tiles_t, 3)
    _check_c("tile64_costs query", q_t, 1)
    _check_c("tile64_costs out", out_t, 1)
    return types.none(tiles_t, s_t, q_t, out_t), _tiles_codegen(4)


def _column_loop(context, builder, sig_j0, sig_j1, j0, j1, acc_t, acc, body):
    """acc[:16] += body(j) for columns j0 <= j < j1, in that order (acc loaded once, stored once)."""
    j0 = context.cast(builder, j0, sig_j0, types.intp)
    j1 = context.cast(builder, j1, sig_j1, types.intp)
    acc_a = context.make_array(acc_t)(context, builder, acc)
    vt = ir.VectorType(ir.FloatType(), 16)
    acc_vp = builder.bitcast(acc_a.data, vt.as_pointer())
    acc_ptr = cgutils.alloca_once_value(builder, builder.load(acc_vp, align=4))
    with cgutils.for_range_slice(builder, j0, j1, ir.Constant(j0.type, 1), inc=True) as (j, _):
        builder.store(builder.fadd(builder.load(acc_ptr), body(j)), acc_ptr)
    builder.store(builder.load(acc_ptr), acc_vp, align=4)


@intrinsic
def box16_accumulate(typingctx, lo_t, hi_t, g_t, q_t, j0_t, j1_t, acc_t):
    """acc[:16] += the squared distances from q to the 16 boxes of group g over columns j0 <= j < j1,
    bounds `lo`, `hi` (G, F, 16); acc C-contiguous float32, at least 16 long (not checked).

    Per lane and column: d = max(lo - q, 0) + max(q - hi, 0); acc = acc + d * d. Empty boxes
    (lo = +inf, hi = -inf) give +inf. Partial sums only grow, so they bound the whole distance below.
    """
    _check_c("box16_accumulate lo", lo_t, 3)
    _check_c("box16_accumulate hi", hi_t, 3)
    _check_c("box16_accumulate query", q_t, 1)
    _check_c("box16_accumulate acc", acc_t, 1)

    def codegen(context, builder, signature, args):
        lo, hi, g, q, j0, j1, acc = args
        lo_a = context.make_array(lo_t)(context, builder, lo)
        hi_a = context.make_array(hi_t)(context, builder, hi)
        q_a = context.make_array(q_t)(context, builder, q)
        g = context.cast(builder, g, signature.args[2], types.intp)
        nf = builder.extract_value(lo_a.shape, 1)
        vt = ir.VectorType(ir.FloatType(), 16)
        w = ir.Constant(nf.type, 16)
        off = builder.mul(g, builder.mul(nf, w))
        lo_p = builder.gep(lo_a.data, [off])
        hi_p = builder.gep(hi_a.data, [off])
        zero = ir.Constant(vt, [0.0] * 16)

        def body(j):
            o = builder.mul(j, w)
            vlo = builder.load(builder.bitcast(builder.gep(lo_p, [o]), vt.as_pointer()), align=4)
            vhi = builder.load(builder.bitcast(builder.gep(hi_p, [o]), vt.as_pointer()), align=4)
            qv = _splat(builder, builder.load(builder.gep(q_a.data, [j])), 16)
            below = builder.fsub(vlo, qv)
            above = builder.fsub(qv, vhi)
            below = builder.select(builder.fcmp_ordered(">", below, zero), below, zero)
            above = builder.select(builder.fcmp_ordered(">", above, zero), above, zero)
            d = builder.fadd(below, above)
            return builder.fmul(d, d)

        _column_loop(context, builder, signature.args[4], signature.args[5], j0, j1, acc_t, acc, body)
        return context.get_dummy_value()

    return types.none(lo_t, hi_t, g_t, q_t, j0_t, j1_t, acc_t), codegen


@intrinsic
def rows16_accumulate(typingctx, x_t, first_t, count_t, q_t, j0_t, j1_t, acc_t):
    """acc[:16] += the canonical cost terms (x - q)**2 of rows first .. first + count - 1 (1 <= count
    <= 16, not checked) of `x` (N, F) over columns j0 <= j < j1; lanes from count on repeat the last
    row. Run over all columns from acc = 0, in pieces or at once, acc holds the canonical costs.

    The rows are read where they lie (a gather of 16 rows per column), so no transposed copy is needed.
    """
    _check_c("rows16_accumulate rows", x_t, 2)
    _check_c("rows16_accumulate query", q_t, 1)
    _check_c("rows16_accumulate acc", acc_t, 1)

    def codegen(context, builder, signature, args):
        x, first, count, q, j0, j1, acc = args
        x_a = context.make_array(x_t)(context, builder, x)
        q_a = context.make_array(q_t)(context, builder, q)
        first = context.cast(builder, first, signature.args[1], types.intp)
        count = context.cast(builder, count, signature.args[2], types.intp)
        nf = builder.extract_value(x_a.shape, 1)
        i64 = nf.type
        vt = ir.VectorType(ir.FloatType(), 16)
        vi = ir.VectorType(i64, 16)
        # byte address of (row min(r, count - 1), column 0) per lane r
        lanes = ir.Constant(vi, list(range(16)))
        last = _splat(builder, builder.sub(count, ir.Constant(i64, 1)), 16)
        rows = builder.select(builder.icmp_signed("<", lanes, last), lanes, last)
        row_bytes = _splat(builder, builder.mul(nf, ir.Constant(i64, 4)), 16)
        base = builder.ptrtoint(builder.gep(x_a.data, [builder.mul(first, nf)]), i64)
        addresses = builder.add(_splat(builder, base, 16), builder.mul(rows, row_bytes))
        ptr_vt = ir.VectorType(x_a.data.type, 16)
        mask = ir.Constant(ir.VectorType(ir.IntType(1), 16), [1] * 16)
        gather = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vt, [ptr_vt, ir.IntType(32), mask.type, vt]),
            "llvm.masked.gather.v16f32.v16p0")

        def body(j):
            col = _splat(builder, builder.mul(j, ir.Constant(i64, 4)), 16)
            ptrs = builder.inttoptr(builder.add(addresses, col), ptr_vt)
            xv = builder.call(gather, [ptrs, ir.Constant(ir.IntType(32), 4), mask, ir.Constant(vt, ir.Undefined)])
            qv = _splat(builder, builder.load(builder.gep(q_a.data, [j])), 16)
            d = builder.fsub(xv, qv)
            return builder.fmul(d, d)

        _column_loop(context, builder, signature.args[4], signature.args[5], j0, j1, acc_t, acc, body)
        return context.get_dummy_value()

    return types.none(x_t, first_t, count_t, q_t, j0_t, j1_t, acc_t), codegen
