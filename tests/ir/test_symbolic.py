"""ir/symbolic.py: sizes compared where every dim is at least 1 (where_nonempty)."""
from autofusion.ir.symbolic import floordiv, maximum, same_where_nonempty, sub, where_nonempty


def test_a_clamp_at_zero_is_the_size_itself_where_sizes_are_at_least_one():
    frames = sub(floordiv(sub("samples", 80), 320), 0)   # a strided convolution's frame count
    clamped = maximum(0, sub(frames, 1))                  # a Slice's end at -1 of it
    assert clamped != sub(frames, 1)                      # for every size, not the same
    assert where_nonempty(clamped) == sub(frames, 1)
    assert same_where_nonempty(("batch", clamped, 384), ("batch", sub(frames, 1), 384))


def test_other_sizes_stay_apart():
    t = floordiv("samples", 320)
    assert where_nonempty(maximum(2, t)) == maximum(2, t)   # only a clamp at 0 goes
    assert not same_where_nonempty(("batch", maximum(0, sub(t, 1))), ("batch", t))
    assert not same_where_nonempty(("batch", 3), ("batch", 3, 1))
    assert not same_where_nonempty(None, ("batch",))
    assert same_where_nonempty((2, "batch"), (2, "batch"))
