"""Unit tests for whisper_build.serving.prompt: both prompt forms, round trip, truncation, errors."""

import pytest

from whisper_build.serving.prompt import (
    LANGUAGE_CODES,
    MAX_PREVIOUS_TEXT_CHARS,
    MAX_PROMPT_TOKENS,
    DecodePrompt,
    normalize_language,
    parse_prompt,
    truncate_prompt_tokens,
)


def test_plain_text_becomes_previous_text():
    # GIVEN plain context text and an explicit language
    prompt = parse_prompt("  Kubernetes, HyperPod and Triton. ", "EN")
    # THEN it is the previous text, stripped, and the language is normalized
    assert prompt == DecodePrompt("Kubernetes, HyperPod and Triton.", "en", "transcribe")


@pytest.mark.parametrize("text", ["", None, "   "])
def test_empty_prompt(text):
    assert parse_prompt(text, None) == DecodePrompt()


def test_special_token_form_is_parsed():
    text = "<|startofprev|>previous text<|startoftranscript|><|de|><|translate|><|notimestamps|>"
    assert parse_prompt(text, None) == DecodePrompt("previous text", "de", "translate")


def test_special_token_form_without_previous_text_or_optional_tokens():
    assert parse_prompt("<|startoftranscript|>", None) == DecodePrompt()
    assert parse_prompt("<|startoftranscript|><|notimestamps|>", None) == DecodePrompt()
    assert parse_prompt("<|startoftranscript|><|fr|>", None) == DecodePrompt(language="fr")


def test_explicit_language_wins_over_language_token():
    prompt = parse_prompt("<|startoftranscript|><|de|><|transcribe|><|notimestamps|>", "fr")
    assert prompt.language == "fr"


@pytest.mark.parametrize(
    "prompt",
    [
        DecodePrompt(),
        DecodePrompt("hello there", None),
        DecodePrompt("Grüße, 你好 <not a token> a|b", "zh", "translate"),
        DecodePrompt("", "yue"),
        DecodePrompt("earlier turn", "en", "transcribe", "The forced start, of it"),
        DecodePrompt(prefix="only a prefix"),
    ],
)
def test_text_prefix_round_trips(prompt):
    # WHEN the gateway renders TEXT_PREFIX and the model parses it back
    assert parse_prompt(prompt.to_text_prefix(), None) == prompt


def test_canonical_text_prefix_matches_the_tensorrt_llm_examples():
    # The TensorRT-LLM whisper run.py default prefix is exactly this string.
    assert DecodePrompt(language="en").to_text_prefix() == "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"
    assert DecodePrompt("ctx").to_text_prefix() == (
        "<|startofprev|>ctx<|startoftranscript|><|transcribe|><|notimestamps|>"
    )


def test_text_after_the_tokens_is_the_forced_prefix():
    # the special-token form of openai/whisper's DecodingOptions.prefix: text after <|notimestamps|>
    text = "<|startofprev|>Before.<|startoftranscript|><|en|><|transcribe|><|notimestamps|> The cat sat"
    assert parse_prompt(text, None) == DecodePrompt("Before.", "en", "transcribe", "The cat sat")
    assert DecodePrompt(prefix="Hi").to_text_prefix() == "<|startoftranscript|><|transcribe|><|notimestamps|>Hi"
    with pytest.raises(ValueError, match="prefix must not contain Whisper special tokens"):
        DecodePrompt(prefix="a <|en|> b")


def test_long_previous_text_is_cut_from_the_left_not_rejected():
    words = [f"w{i}" for i in range(3000)]
    prompt = parse_prompt(" ".join(words), None)
    assert len(prompt.previous_text) <= MAX_PREVIOUS_TEXT_CHARS
    assert prompt.previous_text.endswith("w2999")  # newest context kept
    assert "w0 " not in prompt.previous_text  # oldest dropped


def test_truncate_prompt_tokens_keeps_the_newest():
    tokens = list(range(500))
    kept = truncate_prompt_tokens(tokens)
    assert kept == list(range(500 - MAX_PROMPT_TOKENS, 500))
    assert truncate_prompt_tokens([1, 2, 3]) == [1, 2, 3]
    assert truncate_prompt_tokens([1, 2, 3], 0) == []
    with pytest.raises(ValueError, match="limit must be >= 0"):
        truncate_prompt_tokens([1], -1)


@pytest.mark.parametrize(
    ("text", "language", "message"),
    [
        ("hello", "xx", "unknown language 'xx'"),
        ("hello", "english", "unknown language 'english'"),
        ("<|startoftranscript|><|qq|>", None, "unknown language 'qq'"),
        ("<|startofprev|>a<|startoftranscript|><|startoftranscript|>", None, "exactly once"),
        ("<|startofprev|>only previous", None, "exactly once"),
        ("<|startofprev|>a<|en|>b<|startoftranscript|>", None, r"<\|en\|> is not allowed"),
        ("<|startoftranscript|><|en|>stray<|transcribe|>", None, "text between the tokens"),
        ("<|startoftranscript|><|transcribe|><|en|>", None, r"unexpected special token <\|en\|>"),
        ("<|startoftranscript|><|en|><|de|>", None, r"unexpected special token <\|de\|>"),
        ("<|startoftranscript|><|endoftext|>", None, r"unexpected special token <\|endoftext\|>"),
    ],
)
def test_bad_prompts_raise_clear_errors(text, language, message):
    with pytest.raises(ValueError, match=message):
        parse_prompt(text, language)


def test_unknown_language_message_lists_codes():
    with pytest.raises(ValueError, match="accepted: en, zh, de"):
        normalize_language("klingon")


def test_decode_prompt_validates_direct_construction():
    with pytest.raises(ValueError, match="unknown task"):
        DecodePrompt(task="summarize")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="special tokens"):
        DecodePrompt("a <|en|> b")
    with pytest.raises(ValueError, match="not a normalized"):
        DecodePrompt(language="EN")


def test_language_codes_match_faster_whisper():
    # Guards the copied table against drift (faster-whisper keeps its copy sorted).
    tokenizer = pytest.importorskip("faster_whisper.tokenizer")
    assert sorted(LANGUAGE_CODES) == sorted(tokenizer._LANGUAGE_CODES)
    assert len(set(LANGUAGE_CODES)) == len(LANGUAGE_CODES) == 100
