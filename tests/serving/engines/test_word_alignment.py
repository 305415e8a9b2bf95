"""Words from an alignment matrix (whisper_build/serving/engines/word_alignment.py) and their placement in
segments (``decoded_words``), without torch: the DTW against a line-by-line reference of openai/whisper's
``dtw_cpu``, the word split and the punctuation merge on a small made-up vocabulary."""

from __future__ import annotations

import numpy as np
import pytest

from whisper_build.serving.engines.base import WordTiming
from whisper_build.serving.engines.word_alignment import dtw_paths, split_word_tokens, words_from_path
from whisper_build.serving.results import SegmentResult
from whisper_build.serving.triton_model.segments import decoded_words

EOT = 100
VOCAB = {1: " Hello", 2: ",", 3: " wor", 4: "ld", 5: ".", 6: " (", 7: "yes", 8: ")"}


def _decode(tokens: list[int]) -> str:
    return "".join(VOCAB[t] for t in tokens)


def _reference_dtw(x: np.ndarray) -> tuple[list[int], list[int]]:
    """openai/whisper ``timing.py`` ``dtw_cpu`` + ``backtrace``, one cell at a time."""
    n, m = x.shape
    cost = np.full((n + 1, m + 1), np.inf)
    trace = -np.ones((n + 1, m + 1))
    cost[0, 0] = 0
    for j in range(1, m + 1):
        for i in range(1, n + 1):
            c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
            if c0 < c1 and c0 < c2:
                c, t = c0, 0
            elif c1 < c0 and c1 < c2:
                c, t = c1, 1
            else:
                c, t = c2, 2
            cost[i, j], trace[i, j] = x[i - 1, j - 1] + c, t
    trace[0, :], trace[:, 0] = 2, 1
    i, j, path = n, m, []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        i, j = (i - 1, j - 1) if trace[i, j] == 0 else (i - 1, j) if trace[i, j] == 1 else (i, j - 1)
    return [p[0] for p in path[::-1]], [p[1] for p in path[::-1]]


@pytest.mark.parametrize("compiled", [True, False], ids=["numba", "numpy"])
def test_batched_dtw_takes_the_reference_path_on_every_matrix(compiled: bool) -> None:
    rng = np.random.default_rng(7)
    matrices = [rng.normal(size=(int(rng.integers(1, 9)), int(rng.integers(1, 30)))) for _ in range(40)]
    matrices.append(np.zeros((4, 6)))  # all ties: the left move wins, as in the reference
    for x, (text, time) in zip(matrices, dtw_paths(matrices, compiled), strict=True):
        assert (list(text), list(time)) == _reference_dtw(x)


def test_words_split_on_spaces_and_punctuation_merges_into_its_neighbours() -> None:
    tokens = [1, 2, 3, 4, 5, 6, 7, 8]
    words, groups = split_word_tokens([*tokens, EOT], EOT, _decode, "en")
    assert words == [" Hello", ",", " world", ".", " (yes", ")", ""]  # "yes" has no space: it joins " ("
    assert groups == [[1], [2], [3, 4], [5], [6, 7], [8], [EOT]]
    # a diagonal path: token k (and eot) starts at frame 5k → 0.1 s per token
    n = len(tokens) + 1
    path = (np.arange(n), np.arange(n) * 5)
    timed = words_from_path(path, tokens, [0.5] * len(tokens), EOT, _decode, "en")
    assert [(w.word, w.start, w.end, w.tokens) for w in timed] == [
        (" Hello,", 0.0, 0.1, 2),
        (" world.", 0.2, 0.4, 3),
        (" (yes)", 0.5, 0.7, 3),
    ]
    assert all(w.probability == 0.5 for w in timed)


def test_no_space_languages_split_at_every_character() -> None:
    words, _ = split_word_tokens([1, 3, 4, EOT], EOT, _decode, "ja")
    assert words == [" Hello", " wor", "ld", ""]


def test_decoded_words_keep_only_what_the_segments_kept_and_shift_by_the_offset() -> None:
    words = [
        WordTiming(" a", 0.0, 0.5, 0.9, 1),
        WordTiming(" bc", 0.5, 1.0, 0.8, 2),
        WordTiming(" d", 1.0, 1.5, 0.7, 1),
    ]
    # tokens 11 12 13 14; the segments dropped token 12 (one of " bc"'s) and 14 (" d", a dropped last word)
    segments = [SegmentResult(0.0, 1.0, "a", [11]), SegmentResult(1.0, 2.0, "c", [13])]
    kept = decoded_words(segments, [11, 12, 13, 14], words, offset=10.0)
    assert [(w.word, w.start, w.end, w.tokens) for w in kept] == [(" a", 10.0, 10.5, 1), (" bc", 10.5, 11.0, 1)]
