import numpy as np
import pytest

from motionmatch.search.tags import (TagExpressionError, compile_tag_expression, frame_mask, range_mask)

KNOWN = {"walk", "run", "mirrored", "style:happy", "walk-back", "v1.2", "idle"}


@pytest.mark.parametrize("expr, tags, expected", [
    ("walk", {"walk"}, True),
    ("walk", {"run"}, False),
    ("(walk | run) & !mirrored", {"run"}, True),
    ("(walk | run) & !mirrored", {"run", "mirrored"}, False),
    ("(walk | run) & !mirrored", {"idle"}, False),
    ("walk | run & mirrored", {"walk"}, True),          # & binds tighter than |
    ("walk | run & mirrored", {"run"}, False),
    ("(walk | run) & mirrored", {"run", "mirrored"}, True),
    ("!walk & !run", {"idle"}, True),
    ("!!walk", {"walk"}, True),
    ("!(walk | run)", {"run"}, False),
    ("style:happy & walk-back", {"style:happy", "walk-back"}, True),
    ("  v1.2|idle  ", {"v1.2"}, True),
    ("walk&run", {"walk", "run"}, True),
])
def test_evaluation(expr, tags, expected):
    assert compile_tag_expression(expr, KNOWN)(tags) is expected


@pytest.mark.parametrize("expr, pos, fragment", [
    ("wlak", 0, "unknown tag 'wlak'"),
    ("walk & runn", 7, "unknown tag 'runn'"),
    ("walk &", 6, "expected a tag"),
    ("(walk | run", 11, "expected ')'"),
    ("walk run", 5, "found 'run'"),
    ("walk ) run", 5, "found ')'"),
    ("walk % run", 5, "unexpected character '%'"),
    ("", 0, "empty"),
    ("()", 1, "expected a tag"),
    ("!", 1, "expected a tag"),
])
def test_errors_give_position_and_known_tags(expr, pos, fragment):
    with pytest.raises(TagExpressionError) as info:
        compile_tag_expression(expr, KNOWN)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.pos == pos
    assert fragment in str(err)
    assert "known tags: idle, mirrored, run" in str(err)  # sorted list of every known tag


def test_unknown_tag_suggests_close_names():
    with pytest.raises(TagExpressionError, match="did you mean walk"):
        compile_tag_expression("wakl", KNOWN)


def test_unknown_tag_is_an_error_even_without_known_tags():
    with pytest.raises(TagExpressionError, match=r"known tags: \(none\)"):
        compile_tag_expression("walk", set())


def test_frame_mask_per_range():
    tags = [["walk"], ["run", "mirrored"], ["walk", "mirrored"], ["idle"]]
    starts, stops = [0, 10, 25, 40], [10, 25, 40, 45]
    m = frame_mask("(walk | run) & !mirrored", tags, starts, stops, 50)
    assert m.dtype == bool and m.shape == (50,)
    assert m[:10].all() and not m[10:].any()
    m = frame_mask("mirrored", [set(t) for t in tags], starts, stops, 50)
    assert not m[:10].any() and m[10:40].all() and not m[40:].any()
    assert frame_mask("walk", tags, starts, stops, 50)[45:].sum() == 0  # outside every range


@pytest.mark.parametrize("expr", [None, "", "   "])
def test_empty_expression_allows_everything(expr):
    assert frame_mask(expr, [["walk"]], [0], [5], 8).all()
    assert range_mask(expr, [["walk"], ["run"]]).all()


def test_frame_mask_typo_raises():
    with pytest.raises(TagExpressionError):
        frame_mask("wlak", [["walk"]], [0], [5], 8)


def test_frame_mask_checks_lengths():
    with pytest.raises(ValueError):
        frame_mask("walk", [["walk"], ["run"]], [0], [5], 8)


def test_range_mask():
    np.testing.assert_array_equal(range_mask("!walk", [["walk"], ["run"], []]), [False, True, True])
