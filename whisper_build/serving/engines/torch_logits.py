"""Whisper's logit rules and token choice as fixed-shape tensor code, so a CUDA graph can hold them.

Entry point: :class:`LogitRules` (the details, in its docstring).
Docs: docs/engines.md, "The `torch` engine's decode path".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["LogitRules", "RowState"]

MAX_INITIAL_TIMESTAMP_INDEX = 50
"""openai/whisper ``DecodingOptions.max_initial_timestamp`` 1.0 s at 0.02 s per timestamp token."""


@dataclass
class RowState:
    """Per-row decoding state of one batch bucket (all on the model's device; ``b`` rows).

    Attributes:
        token: ``[b]`` long, the token fed to the next decoder step.
        pos: ``[b]`` long, that token's position in the decoder sequence.
        step: ``[b]`` long, new tokens chosen so far per row (equal across a static batch; rows of
            the in-flight scheduler joined at different steps).
        limit: ``[b]`` long, most new tokens per row (``max_new_tokens``, cut to the context).
        finished: ``[b]`` bool, the row produced ``<|endoftext|>`` or reached its limit.
        sum_logprob: ``[b]`` float32, summed log-probs of the chosen tokens, end-of-text included.
        history: ``[b, max_new]`` long, the chosen tokens (end-of-text after a row finished).
        seen: ``[b, vocab]`` bool, tokens chosen so far (repetition penalty).
        temperature: ``[b]`` float32, 0 = greedy.
        penalty: ``[b]`` float32, repetition penalty (1 = off).
        timestamps: ``[b]`` bool, the row predicts timestamp tokens.
        prev1: ``[b]`` long, last chosen token (-1 before the first).
        prev2: ``[b]`` long, the one before (-1 before the second).
        last_ts: ``[b]`` long, id of the last timestamp token chosen (-1 none).
    """

    token: torch.Tensor
    pos: torch.Tensor
    step: torch.Tensor
    limit: torch.Tensor
    finished: torch.Tensor
    sum_logprob: torch.Tensor
    history: torch.Tensor
    seen: torch.Tensor
    temperature: torch.Tensor
    penalty: torch.Tensor
    timestamps: torch.Tensor
    prev1: torch.Tensor
    prev2: torch.Tensor
    last_ts: torch.Tensor

    @classmethod
    def allocate(cls, rows: int, max_new: int, vocab: int, device: torch.device) -> RowState:
        """Zeroed state for ``rows`` rows (views of its leading rows serve the smaller buckets)."""

        def zeros(*shape: int, dtype: torch.dtype = torch.long) -> torch.Tensor:
            return torch.zeros(shape, dtype=dtype, device=device)

        return cls(
            token=zeros(rows), pos=zeros(rows), step=zeros(rows), limit=zeros(rows),
            finished=zeros(rows, dtype=torch.bool), sum_logprob=zeros(rows, dtype=torch.float32),
            history=zeros(rows, max_new), seen=zeros(rows, vocab, dtype=torch.bool),
            temperature=zeros(rows, dtype=torch.float32), penalty=zeros(rows, dtype=torch.float32),
            timestamps=zeros(rows, dtype=torch.bool), prev1=zeros(rows), prev2=zeros(rows), last_ts=zeros(rows),
        )  # fmt: skip

    def clear(self, eot: int) -> None:
        """Put every row in its state before the first token.

        Nothing chosen, seen or finished; history end-of-text; no previous token or timestamp (-1).
        ``pos``, ``limit``, ``temperature``, ``penalty`` and ``timestamps`` are the caller's to set.
        """
        for flag in (self.finished, self.seen, self.sum_logprob, self.step):
            flag.zero_()
        self.history.fill_(eot)
        for last in (self.prev1, self.prev2, self.last_ts):
            last.fill_(-1)

    def rows(self, b: int) -> RowState:
        """The first ``b`` rows, as views (the same memory, so a graph captured on them sees updates)."""
        return RowState(**{name: getattr(self, name)[:b] for name in self.__dataclass_fields__})


class LogitRules:
    """The fixed masks of one checkpoint and :meth:`choose`, the per-step token choice.

    Args:
        vocab: vocabulary size (logit columns).
        eot: ``<|endoftext|>`` id; ids above it are special or timestamp tokens.
        timestamp_begin: ``<|0.00|>`` id.
        no_timestamps: ``<|notimestamps|>`` id.
        suppress: the checkpoint's ``suppress_tokens``.
        begin_suppress: its ``begin_suppress_tokens``.
        forbid_eot: benchmark mode: never end (a fixed number of tokens per window).
        device: where the masks live.

    Every rule is branch-free over per-row state tensors (no host reads), so the same function runs
    inside a captured decoder step and eagerly for the first token. Rules and their order follow
    openai/whisper ``decoding.py``:

    - ``SuppressBlank``: ``begin_suppress_tokens`` (blank, end-of-text) at the first new token;
    - ``SuppressTokens``: the checkpoint's ``suppress_tokens``, plus every special token above
      ``<|endoftext|>`` (rows without timestamps: timestamp tokens too);
    - ``ApplyTimestampRules`` (rows with timestamps): ``<|notimestamps|>`` never; timestamps come in
      pairs (after a lone timestamp no text, after a pair no timestamp); they never decrease and a
      segment is never empty; the first token is a timestamp ≤ ``max_initial_timestamp`` (1.0 s);
      when the timestamp tokens' total probability beats every text token, a timestamp is forced;
    - repetition penalty (``RepetitionPenaltyLogitsProcessor`` in transformers): a seen token's
      logit is divided by the penalty when positive, multiplied when negative;
    - choice: argmax at temperature 0, else a sample of ``softmax(logits / T)`` drawn as Gumbel-max
      (``argmax(logits / T − log(−log U))``, U uniform), which needs no host sync; the log-prob
      summed per row is that of the rule-filtered, unscaled distribution, as openai/whisper sums.
    """

    def __init__(
        self,
        vocab: int,
        eot: int,
        timestamp_begin: int,
        no_timestamps: int,
        suppress: Sequence[int],
        begin_suppress: Sequence[int],
        forbid_eot: bool,
        device: torch.device,
    ) -> None:
        self.eot, self.timestamp_begin, self.forbid_eot = eot, timestamp_begin, forbid_eot
        col = torch.arange(vocab, device=device)
        listed = _mask(vocab, suppress, device)
        self.col = col
        self.text_col = col < eot
        self.ts_col = col >= timestamp_begin
        # without timestamps every id above eot; with them the specials between eot and <|0.00|>,
        # <|notimestamps|> among them
        self.suppress_plain = listed | (col > eot)
        self.suppress_ts = listed | ((col > eot) & ~self.ts_col) | (col == no_timestamps)
        self.begin = _mask(vocab, begin_suppress, device)
        self.neg_inf = torch.tensor(float("-inf"), device=device)  # made here: no host copy inside a capture
        self.first_ts_forbidden = (col < timestamp_begin) | (col > timestamp_begin + MAX_INITIAL_TIMESTAMP_INDEX)

    def filter(self, logits: torch.Tensor, s: RowState, full: bool = True) -> torch.Tensor:
        """``logits`` (``[b, vocab]`` float32) with every rule applied (``-inf`` where forbidden).

        ``full=False`` applies only the suppress masks: the same result when no row has timestamps
        or a repetition penalty other than 1 (fewer kernels in the captured step).
        """
        first = (s.step == 0)[:, None]
        forbid = self.suppress_plain[None, :] | (first & self.begin)
        if self.forbid_eot:
            forbid = forbid | (self.col == self.eot)
        if not full:
            return logits.masked_fill(forbid, float("-inf"))
        neg = self.neg_inf
        penalized = torch.where(logits > 0, logits / s.penalty[:, None], logits * s.penalty[:, None])
        logits = torch.where(s.seen, penalized, logits)
        ts = s.timestamps[:, None]
        forbid = (ts & self.suppress_ts) | (~ts & forbid)
        forbid = forbid | (first & self.begin)
        if self.forbid_eot:
            forbid = forbid | (self.col == self.eot)
        last_was_ts = (s.step >= 1) & (s.prev1 >= self.timestamp_begin)
        penult_was_ts = (s.step < 2) | (s.prev2 >= self.timestamp_begin)
        pair_done = (last_was_ts & penult_was_ts)[:, None]
        lone = (last_was_ts & ~penult_was_ts)[:, None]
        ts_floor = torch.where(lone[:, 0], s.last_ts, s.last_ts + 1)[:, None]
        ts_rules = (
            (pair_done & self.ts_col)
            | (lone & self.text_col)
            | ((s.last_ts >= 0)[:, None] & self.ts_col & (self.col < ts_floor))
            | (first & self.first_ts_forbidden)
        )
        forbid = forbid | (ts & ts_rules)
        logits = logits.masked_fill(forbid, float("-inf"))
        logprobs = logits.log_softmax(-1)
        ts_mass = torch.where(self.ts_col, logprobs, neg).logsumexp(-1)
        text_max = torch.where(self.ts_col, neg, logprobs).amax(-1)
        force_ts = (ts[:, 0] & (ts_mass > text_max))[:, None]
        return logits.masked_fill(force_ts & ~self.ts_col, float("-inf"))

    def choose(self, logits: torch.Tensor, s: RowState, full: bool = True) -> None:
        """Pick each row's next token from ``logits`` (``[b, vocab]`` float32) and advance ``s`` in place.

        ``full=False`` (see :meth:`filter`) also skips sampling: only for greedy rows.
        """
        logits = self.filter(logits, s, full)
        if full:
            gumbel = -torch.log(-torch.log(torch.rand_like(logits)))
            temperature = s.temperature[:, None]
            scaled = torch.where(temperature > 0, logits / temperature.clamp(min=1e-6) + gumbel, logits)
            token = torch.where(s.finished, self.eot, scaled.argmax(-1))
        else:
            token = torch.where(s.finished, self.eot, logits.argmax(-1))
        chosen = logits.gather(1, token[:, None])[:, 0] - logits.logsumexp(-1)
        s.sum_logprob.add_(torch.where(s.finished, 0.0, chosen))
        s.history.scatter_(1, s.step.clamp(max=s.history.shape[1] - 1)[:, None], token[:, None])
        s.finished.logical_or_(token == self.eot).logical_or_(s.step + 1 >= s.limit)
        if full:
            s.seen.scatter_(1, token[:, None], True)
            s.last_ts.copy_(torch.where(token >= self.timestamp_begin, token, s.last_ts))
            s.prev2.copy_(s.prev1)
            s.prev1.copy_(token)
        s.token.copy_(token)
        s.step.add_(1)


def _mask(vocab: int, ids: Sequence[int], device: torch.device) -> torch.Tensor:
    mask = torch.zeros(vocab, dtype=torch.bool)
    valid = [i for i in ids if 0 <= i < vocab]
    mask[valid] = True
    return mask.to(device)
