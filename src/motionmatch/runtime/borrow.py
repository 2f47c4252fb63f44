"""Arrays without reference counting, for the compiled per-agent loops of the crowd's stages.

numba counts the references to an array's memory with atomic operations: a compiled function
increments the count of every array it is given on entry and decrements it on exit, and every row view
`a[i]` does the same. The stages call per-agent functions with records holding 5 to 36 arrays, so
a tick of 10,000 agents made millions of atomic operations: a sixth to a quarter of the playback and
output stages' time on one thread (perf, `bench crowd` on the default database), and two threads
updating the same counters contend for their cache lines.

A stage borrows its records instead (`borrow`): the same arrays with no reference count (a null
memory-info pointer, which numba's increments and decrements skip), valid while the caller holds the
arrays, as it does for the whole stage call. A borrowed array must not outlive the call: the stages
only read and write them, and return nothing.
"""
from __future__ import annotations

from numba.core import cgutils, types
from numba.core.errors import TypingError
from numba.extending import intrinsic


def _borrowable(ty) -> bool:
    if isinstance(ty, types.Array):
        return True
    if isinstance(ty, types.BaseTuple):
        return all(_borrowable(t) for t in ty.types)
    # Scalars carry no reference count; anything else (lists, objects) would be decremented by the
    # caller without the increment a new reference needs.
    return isinstance(ty, (types.Number, types.Boolean))


def _borrowed(context, builder, ty, value):
    if isinstance(ty, types.Array):
        ary = context.make_array(ty)(context, builder, value=value)
        ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
        return ary._getvalue()
    if isinstance(ty, types.BaseTuple):
        items = [_borrowed(context, builder, t, builder.extract_value(value, k)) for k, t in enumerate(ty.types)]
        return context.make_tuple(builder, ty, items)
    return value


@intrinsic
def borrow(typingctx, x):
    """x (an array, or a record or tuple of arrays, numbers and such records) with every array's
    reference count dropped (module docstring): the same data, shapes and types, for use inside the
    calling compiled function only."""
    if not _borrowable(x):
        raise TypingError(f"borrow takes arrays, numbers and tuples of them, not {x}")

    def codegen(context, builder, sig, args):
        return _borrowed(context, builder, sig.args[0], args[0])

    return x(x), codegen
