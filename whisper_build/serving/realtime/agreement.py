"""LocalAgreement-2: append-only deltas from repeated decodes of a growing turn (docs/gateway.md, "Live transcription").

Each update decodes the whole turn so far; the words two consecutive decodes agree on (compared without
case and punctuation) are confirmed and sent once as a delta. Confirmed words are never retracted: the
final decode only adds the tail after them (Macháček et al., "Turning Whisper into Real-Time
Transcription System", 2023; ufal/whisper_streaming ``HypothesisBuffer``). Each decode is forced to start with
the confirmed words (``context``), so it is only their continuation that two decodes must agree on.
"""

from __future__ import annotations

import re

__all__ = ["FirstWordsBuffer", "HypothesisBuffer"]

_NORMAL = re.compile(r"[^\w']+")


def _key(word: str) -> str:
    return _NORMAL.sub("", word.lower())


class HypothesisBuffer:
    """The confirmed words of one turn and the last unconfirmed hypothesis.

    ``confirmed`` joined by spaces is everything sent as deltas so far; :meth:`insert` returns the next
    delta (``""`` when nothing new is agreed), :meth:`finish` the tail for ``completed``.
    """

    def __init__(self) -> None:
        self.confirmed: list[str] = []
        self._previous: list[str] = []

    def insert(self, text: str) -> str:
        """Agree ``text`` (the turn's latest full decode) with the previous one; the delta to send."""
        words = text.split()
        agreed = 0
        for old, new in zip(self._previous, words, strict=False):
            if _key(old) != _key(new):
                break
            agreed += 1
        self._previous = words
        if agreed == len(words):  # the last word is at the audio's edge (maybe cut): wait for audio past it
            agreed -= 1
        if agreed <= len(self.confirmed) or not self._matches_confirmed(words):
            return ""
        return self._confirm(words[len(self.confirmed) : agreed])

    def finish(self, text: str) -> str:
        """The final decode's words after the confirmed ones, which it starts with (they are its forced prefix)."""
        return self._confirm(text.split()[len(self.confirmed) :])

    @property
    def text(self) -> str:
        """Every confirmed word, joined by single spaces."""
        return " ".join(self.confirmed)

    def _matches_confirmed(self, words: list[str]) -> bool:
        return [_key(w) for w in words[: len(self.confirmed)]] == [_key(w) for w in self.confirmed]

    def _confirm(self, new: list[str]) -> str:
        if not new:
            return ""
        delta = (" " if self.confirmed else "") + " ".join(new)
        self.confirmed += new
        return delta


class FirstWordsBuffer(HypothesisBuffer):
    """LOAD TESTS ONLY: each update confirms the first two words of its decode beyond the confirmed prefix.

    Random weights never agree twice, so LocalAgreement would send no delta and a load test would not
    see the deltas' traffic; selected only by the server's ``realtime_load_test_confirmation`` setting.
    """

    def insert(self, text: str) -> str:
        """The next (up to) two words of ``text`` after as many words as are confirmed."""
        words = text.split()
        start = len(self.confirmed)
        return self._confirm(words[start : start + 2])
