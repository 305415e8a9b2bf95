"""Words from a token × frame alignment matrix: DTW, word split, jump times, punctuation merged.

The engine-independent half of openai/whisper ``timing.py`` ``find_alignment`` (numpy only, no torch):
an engine that has the alignment heads' cross-attention (``torch``: :mod:`.torch_alignment`) turns it
into a ``[tokens + 1, frames]`` matrix, and :func:`words_from_matrix` does the rest. Frames are the
encoder's, 50 per second. Docs: docs/engines.md, "Word timings".
"""

from __future__ import annotations

import functools
import string
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from whisper_build.serving.engines.base import WordTiming

__all__ = [
    "APPEND_PUNCTUATIONS",
    "FRAMES_PER_SECOND",
    "PREPEND_PUNCTUATIONS",
    "dtw_paths",
    "split_word_tokens",
    "words_from_path",
]

FRAMES_PER_SECOND = 50.0
"""Encoder frames per second: hop 160 samples at 16 kHz, conv stride 2 (openai/whisper ``audio.py`` ``TOKENS_PER_SECOND``)."""
PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
"""openai/whisper ``transcribe()`` defaults for merging punctuation into words."""
_NO_SPACE_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})
"""openai/whisper ``tokenizer.py`` ``split_to_word_tokens``: split these at unicode points, not spaces."""


Path = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]


def dtw_paths(costs: Sequence[npt.NDArray[np.float64]], compiled: bool = True) -> list[Path]:
    """Dynamic time warping of each ``[N, M]`` cost matrix: openai/whisper ``timing.py`` ``dtw_cpu`` + ``backtrace``.

    The same recurrence, moves and tie rule (``cost[i, j] = x[i-1, j-1] + min(diagonal, up, left)``,
    the diagonal on a strict minimum, else up on a strict minimum, else left). With numba importable
    (senko, the diarization model, depends on it, so every serving image has it) and ``compiled``,
    openai's own loop compiled per matrix (about 1 ns a cell); else in numpy, a column at a time for
    all matrices at once: within a column, ``c[i] = x[i] + min(a[i], c[i-1])`` is a min-plus prefix
    scan, ``c = S + cummin(a - S_before)`` with ``S`` the column's running sum (tens of ms a window).

    Args:
        costs: float matrices, tokens × frames, each at least 1 × 1.
        compiled: use numba when it is importable.

    Returns:
        per matrix, ``(text_indices, time_indices)`` of the path from ``(0, 0)`` to ``(N-1, M-1)``.
    """
    if not costs:
        return []
    kernel = _numba_dtw() if compiled else None
    if kernel is not None:
        n = np.array([c.shape[0] for c in costs], dtype=np.int64)
        m = np.array([c.shape[1] for c in costs], dtype=np.int64)
        x = np.concatenate([np.asarray(c, dtype=np.float64).ravel() for c in costs])
        offsets = np.concatenate([[0], np.cumsum(n * m)[:-1]]).astype(np.int64)
        paths = np.zeros((len(costs), 2, int((n + m).max())), dtype=np.int64)
        lengths = np.zeros(len(costs), dtype=np.int64)
        kernel(x, offsets, n, m, paths, lengths)
        return [
            (paths[k, 0, : lengths[k]][::-1].copy(), paths[k, 1, : lengths[k]][::-1].copy()) for k in range(len(costs))
        ]
    shapes = [c.shape for c in costs]
    n_max, m_max = max(s[0] for s in shapes), max(s[1] for s in shapes)
    x = np.zeros((m_max, len(costs), n_max))  # frame-major: each column is one contiguous block
    for k, c in enumerate(costs):
        x[: c.shape[1], k, : c.shape[0]] = c.T  # padding after a matrix's end never reaches its path
    cost = np.full((len(costs), n_max + 1), np.inf)
    cost[:, 0] = 0.0
    trace = np.full((m_max + 1, len(costs), n_max + 1), 2, dtype=np.int8)
    new = np.empty_like(cost)
    for j in range(1, m_max + 1):
        column = x[j - 1]
        diagonal, left = cost[:, :-1], cost[:, 1:]
        before = np.cumsum(column, axis=1) - column
        new[:, 0] = np.inf
        new[:, 1:] = before + column + np.minimum.accumulate(np.minimum(diagonal, left) - before, axis=1)
        up = new[:, :-1]
        moves = trace[j, :, 1:]
        moves[(up < diagonal) & (up < left)] = 1
        moves[(diagonal < up) & (diagonal < left)] = 0
        cost, new = new, cost
    trace[:, :, 0] = 2
    trace[0, :, :] = 1
    return _backtrace(trace, [s[0] for s in shapes], [s[1] for s in shapes])


@functools.cache
def _numba_dtw() -> Callable[..., None] | None:
    """openai/whisper's ``dtw_cpu`` + ``backtrace`` as one numba function over a padded batch, or None.

    ``dtw(x, offsets [B], n [B], m [B], paths [B, 2, N + M], lengths [B])``: matrix ``b`` is
    ``x[offsets[b] : offsets[b] + n[b] * m[b]]`` row-major; matrices in parallel (``prange``), each
    path written reversed into ``paths[b, :, :lengths[b]]``. Compiled at the first
    call (seconds): the ``torch`` engine calls it once at load.
    """
    try:
        import numba
    except ImportError:
        return None

    @numba.njit(parallel=True, cache=False)
    def dtw(x, offsets, n_of, m_of, paths, lengths):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
        for b in numba.prange(offsets.shape[0]):
            n, m, base = n_of[b], m_of[b], offsets[b]
            cost = np.full((n + 1, m + 1), np.inf)
            trace = np.full((n + 1, m + 1), -1, dtype=np.int8)
            cost[0, 0] = 0.0
            for j in range(1, m + 1):
                for i in range(1, n + 1):
                    c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
                    if c0 < c1 and c0 < c2:
                        c, t = c0, 0
                    elif c1 < c0 and c1 < c2:
                        c, t = c1, 1
                    else:
                        c, t = c2, 2
                    cost[i, j] = x[base + (i - 1) * m + j - 1] + c
                    trace[i, j] = t
            trace[0, :] = 2
            trace[:, 0] = 1
            i, j, k = n, m, 0
            while i > 0 or j > 0:
                paths[b, 0, k], paths[b, 1, k] = i - 1, j - 1
                k += 1
                if trace[i, j] == 0:
                    i, j = i - 1, j - 1
                elif trace[i, j] == 1:
                    i -= 1
                else:
                    j -= 1
            lengths[b] = k

    return dtw


def _backtrace(
    trace: npt.NDArray[np.int8], n: list[int], m: list[int]
) -> list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]:
    """openai/whisper ``timing.py`` ``backtrace`` from each ``(n, m)``, all matrices a step at a time."""
    rows = np.arange(len(n))
    i, j = np.array(n), np.array(m)
    steps_i, steps_j = [], []
    while True:
        active = (i > 0) | (j > 0)
        if not active.any():
            break
        steps_i.append(np.where(active, i - 1, -2))
        steps_j.append(j - 1)
        move = trace[j, rows, i]
        i = np.where(active & (move != 2), i - 1, i)
        j = np.where(active & (move != 1), j - 1, j)
    path_i, path_j = np.array(steps_i[::-1]).T, np.array(steps_j[::-1]).T
    out = []
    for k in rows:
        keep = path_i[k] != -2  # the steps after this matrix's path ended
        out.append((path_i[k][keep].astype(np.int64), path_j[k][keep].astype(np.int64)))
    return out


def split_word_tokens(
    tokens: Sequence[int], eot: int, decode: Callable[[list[int]], str], language: str | None
) -> tuple[list[str], list[list[int]]]:
    """Words and their tokens: openai/whisper ``tokenizer.py`` ``split_to_word_tokens``.

    Args:
        tokens: text token ids, ending with ``eot`` (which becomes a word of its own).
        eot: ``<|endoftext|>``; ids ``>= eot`` decode as nothing here.
        decode: text ids → text.
        language: the decode's language (``zh``, ``ja``, … split at unicode points, others at spaces).
    """
    full = _text(tokens, eot, decode)
    words: list[str] = []
    word_tokens: list[list[int]] = []
    current: list[int] = []
    offset = 0
    for token in tokens:  # split_tokens_on_unicode: cut wherever the text so far is whole characters
        current.append(token)
        decoded = _text(current, eot, decode)
        bad = decoded.find("\ufffd")
        if bad < 0 or (offset + bad < len(full) and full[offset + bad] == "\ufffd"):
            words.append(decoded)
            word_tokens.append(current)
            current = []
            offset += len(decoded)
    if language in _NO_SPACE_LANGUAGES:
        return words, word_tokens
    joined: list[str] = []
    joined_tokens: list[list[int]] = []
    for word, ids in zip(words, word_tokens, strict=True):  # split_tokens_on_spaces
        if ids[0] >= eot or word.startswith(" ") or word.strip() in string.punctuation or not joined:
            joined.append(word)
            joined_tokens.append(list(ids))
        else:
            joined[-1] += word
            joined_tokens[-1].extend(ids)
    return joined, joined_tokens


def _text(tokens: Sequence[int], eot: int, decode: Callable[[list[int]], str]) -> str:
    return decode([t for t in tokens if t < eot])


def words_from_path(
    path: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]],
    text_tokens: Sequence[int],
    probabilities: Sequence[float],
    eot: int,
    decode: Callable[[list[int]], str],
    language: str | None,
) -> list[WordTiming]:
    """Word timings of one window from its DTW path (openai/whisper ``find_alignment`` + ``merge_punctuations``).

    Args:
        path: ``(text_indices, time_indices)`` over ``len(text_tokens) + 1`` rows (the last is ``eot``).
        text_tokens: the aligned text ids (``< eot``).
        probabilities: each text token's probability under the teacher-forced pass.
        eot: ``<|endoftext|>``.
        decode: text ids → text.
        language: the decode's language (word split rule).

    Returns:
        the words in order, times in seconds from the window's start; ``[]`` for no text.
    """
    words, word_tokens = split_word_tokens([*text_tokens, eot], eot, decode, language)
    if len(word_tokens) <= 1:
        return []
    text_idx, time_idx = path
    bounds = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(text_idx), (1, 0), constant_values=1).astype(bool)
    jump_times = time_idx[jumps] / FRAMES_PER_SECOND
    starts, ends = jump_times[bounds[:-1]], jump_times[bounds[1:]]
    probs = np.asarray(probabilities, dtype=np.float64)
    entries = [
        [w, list(t), float(s), float(e), float(np.mean(probs[i:j])) if j > i else 0.0]
        for w, t, s, e, i, j in zip(words[:-1], word_tokens[:-1], starts, ends, bounds[:-1], bounds[1:], strict=True)
    ]
    _merge_punctuations(entries)
    return [WordTiming(str(w), float(s), max(float(s), float(e)), float(p), len(t)) for w, t, s, e, p in entries if w]


def _merge_punctuations(entries: list[list[object]]) -> None:
    """openai/whisper ``timing.py`` ``merge_punctuations`` over ``[word, tokens, start, end, probability]`` rows."""
    i, j = len(entries) - 2, len(entries) - 1
    while i >= 0:  # a prepended mark joins the word after it
        previous, following = entries[i], entries[j]
        word = str(previous[0])
        if word.startswith(" ") and word.strip() in PREPEND_PUNCTUATIONS:
            following[0] = word + str(following[0])
            following[1] = [*previous[1], *following[1]]  # type: ignore[misc]
            previous[0], previous[1] = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(entries):  # an appended mark joins the word before it
        previous, following = entries[i], entries[j]
        if not str(previous[0]).endswith(" ") and str(following[0]) in APPEND_PUNCTUATIONS:
            previous[0] = str(previous[0]) + str(following[0])
            previous[1] = [*previous[1], *following[1]]  # type: ignore[misc]
            following[0], following[1] = "", []
        else:
            i = j
        j += 1
