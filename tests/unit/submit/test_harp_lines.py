"""#HARP lines: found anywhere at column 0, passed on verbatim, 'off' opts out."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from harp_submit import harp_lines


def test_found_at_column_zero_anywhere_in_the_script() -> None:
    text = (
        "#HARP first\n#!/bin/sh\necho x\n#HARP dnn model=llama-7b gpus=a100 # note\r\n"
        " #HARP indented\n#HARPOON no\n#HARP"
    )
    assert harp_lines.find(text) == ["#HARP first", "#HARP dnn model=llama-7b gpus=a100 # note", "#HARP"]


def test_words_drop_comments() -> None:
    assert harp_lines.words("#HARP dnn model=x  # why") == ["dnn", "model=x"]


def test_off_in_any_case_but_only_as_the_first_word() -> None:
    assert harp_lines.is_off(["#HARP off"])
    assert harp_lines.is_off(["#HARP dnn x", "#HARP OFF # not today"])
    assert not harp_lines.is_off(["#HARP dnn off"])
    assert not harp_lines.is_off(["#HARP offload"])
    assert not harp_lines.is_off([])


@given(
    st.lists(
        st.sampled_from(["#HARP off", "#HARP dnn a=b", "#HARPX", " #HARP x", "echo", "#SBATCH -t 5", ""]), max_size=12
    )
)
def test_find_returns_exactly_the_harp_lines(lines: list[str]) -> None:
    text = "\n".join(lines)
    expected = [line for line in lines if line == "#HARP" or line.startswith(("#HARP ", "#HARP\t"))]
    assert harp_lines.find(text) == expected
